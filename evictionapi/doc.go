// Package evictionapi is the vocabulary shared by the room that decides
// evictions (package eviction) and the rooms that carry them out (lifecycle in
// standalone and node mode, guard beside a kubelet): the pod as the policy
// sees it, the decision, the actor interface the decision is carried out
// through, its timing, and the errors an actor or admission returns.
//
// It holds types only, so that an act room can implement Actor and read a
// Decision without importing the policy, the manager loop or their
// configuration; package eviction re-exports every name here.
package evictionapi
