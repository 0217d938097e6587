package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/qos"
)

// podCLI is what the pod subcommands share: the socket flag, and the clock
// that ages pods in tables.
type podCLI struct {
	socket string
	now    func() time.Time
}

func newPodCmd(_ *globalFlags) *cobra.Command {
	return podCommand(&podCLI{now: time.Now})
}

func podCommand(p *podCLI) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pod",
		Short: "Apply, list, show and remove the node's pods, read their logs, run commands in them, attach and port-forward",
		Long: `Talks to a running agent (nodeguard run) through its API socket, which only
root and the agent's own user may use. Machine-readable output speaks
Kubernetes: "ls -o json" prints a v1 PodList, "get -o json|yaml" a v1 Pod.`,
		Args: cobra.NoArgs,
	}
	cmd.PersistentFlags().StringVar(&p.socket, "api-socket", api.DefaultSocket, "the agent's API socket (nodeguard run --api-socket)")
	cmd.AddCommand(p.applyCmd(), p.lsCmd(), p.getCmd(), p.rmCmd(), p.logsCmd(), p.execCmd(), p.attachCmd(), p.portForwardCmd())
	return cmd
}

func (p *podCLI) client() *api.Client { return api.NewClient(p.socket) }

func (p *podCLI) applyCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f FILE|DIR|-",
		Short: "Apply pod manifests from a file, a directory (*.yaml, *.yml, *.json in name order) or stdin",
		Long: `Sends each manifest file to the agent, which applies all of its pods or none.
With a directory, every file is sent even when one is refused, and the
command fails at the end if any was. A pod's UID derives from the file's
absolute path and its content, so re-applying an unchanged file changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			srcs, err := readManifests(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			c := p.client()
			defer c.Close()
			out := cmd.OutOrStdout()
			var errs []error
			for _, s := range srcs {
				l, err := c.Apply(cmd.Context(), s.data, s.source)
				if _, ok := errors.AsType[*api.SocketError](err); ok {
					return err // no agent: the next file would fail alike
				}
				if err != nil {
					errs = append(errs, err)
					continue
				}
				for _, pod := range l.Items {
					fmt.Fprintf(out, "pod/%s applied\n", pod.Name)
				}
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "manifest file, directory of manifests, or - for stdin")
	cmd.MarkFlagRequired("filename")
	return cmd
}

// manifest is one source sent to Apply.
type manifest struct {
	source string // absolute path, or "stdin"
	data   []byte
}

// readManifests reads the file, every manifest of the directory, or stdin
// for "-". Everything is read before anything is sent, so that an
// unreadable file applies nothing.
func readManifests(arg string, stdin io.Reader) ([]manifest, error) {
	if arg == "-" {
		data, err := readLimited(stdin, "stdin")
		if err != nil {
			return nil, err
		}
		return []manifest{{source: "stdin", data: data}}, nil
	}
	abs, err := filepath.Abs(arg)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", arg, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("read manifests: %w", err)
	}
	paths := []string{abs}
	if fi.IsDir() {
		entries, err := os.ReadDir(abs) // sorted by name
		if err != nil {
			return nil, fmt.Errorf("read manifest directory: %w", err)
		}
		paths = paths[:0]
		for _, e := range entries {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".yaml", ".yml", ".json":
			default:
				continue
			}
			path := filepath.Join(abs, e.Name())
			if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
				continue // a directory or a dangling link named like a manifest
			}
			paths = append(paths, path)
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("read manifest directory %s: no *.yaml, *.yml or *.json files", abs)
		}
	}
	out := make([]manifest, 0, len(paths))
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("read manifest: %w", err)
		}
		data, err := readLimited(f, path)
		f.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, manifest{source: path, data: data})
	}
	return out, nil
}

// readLimited reads a manifest, refusing one above podspec.MaxManifestBytes
// here rather than after sending it.
func readLimited(r io.Reader, name string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, podspec.MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", name, err)
	}
	if len(data) > podspec.MaxManifestBytes {
		return nil, fmt.Errorf("read manifest %s: %w: more than %d bytes", name, podspec.ErrTooLarge, podspec.MaxManifestBytes)
	}
	return data, nil
}

func (p *podCLI) lsCmd() *cobra.Command {
	var output, namespace string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List pods: a table like kubectl's, or -o json (a v1 PodList) or -o yaml",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			c := p.client()
			defer c.Close()
			l, err := c.List(cmd.Context())
			if err != nil {
				return err
			}
			if namespace != "" {
				kept := l.Items[:0]
				for _, pod := range l.Items {
					if pod.Namespace == namespace {
						kept = append(kept, pod)
					}
				}
				l.Items = kept
			}
			if output != "" {
				return printObject(cmd.OutOrStdout(), output, l)
			}
			if len(l.Items) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "No pods found.")
				return nil
			}
			return printPodTable(cmd.OutOrStdout(), l.Items, p.now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml (default: a table)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "only pods of this namespace (default: all)")
	return cmd
}

func (p *podCLI) getCmd() *cobra.Command {
	var output, namespace string
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show one pod: -o yaml or -o json print the v1 Pod with its status",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			c := p.client()
			defer c.Close()
			pod, err := c.Get(cmd.Context(), namespace, args[0])
			if err != nil {
				return err
			}
			if output != "" {
				return printObject(cmd.OutOrStdout(), output, pod)
			}
			return printPodTable(cmd.OutOrStdout(), []corev1.Pod{*pod}, p.now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json (default: a table row)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", podspec.DefaultNamespace, "the pod's namespace")
	return cmd
}

func (p *podCLI) rmCmd() *cobra.Command {
	var namespace string
	cmd := &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"delete"},
		Short:   "Remove a pod: the agent stops its containers and tears it down",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := p.client()
			defer c.Close()
			if err := c.Delete(cmd.Context(), namespace, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pod/%s deleted\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", podspec.DefaultNamespace, "the pod's namespace")
	return cmd
}

func (p *podCLI) logsCmd() *cobra.Command {
	var namespace string
	var since time.Duration
	opts := api.LogOptions{}
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print a container's log (across its rotated files)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if since < 0 {
				return fmt.Errorf("--since %s: want a positive duration", since)
			}
			if opts.Follow && opts.Previous {
				return errors.New("--follow and --previous: a previous container writes no more")
			}
			// Whole seconds, rounded up, as kubectl sends sinceSeconds.
			opts.SinceSeconds = int64((since + time.Second - 1) / time.Second)
			c := p.client()
			defer c.Close()
			err := c.Logs(cmd.Context(), namespace, args[0], opts, cmd.OutOrStdout())
			if opts.Follow && errors.Is(err, context.Canceled) {
				return nil // interrupted: the normal end of a follow
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVarP(&namespace, "namespace", "n", podspec.DefaultNamespace, "the pod's namespace")
	f.StringVarP(&opts.Container, "container", "c", "", "container name (default: the pod's default container)")
	f.IntVar(&opts.Tail, "tail", -1, "lines from the end to print; -1 for all")
	f.BoolVarP(&opts.Follow, "follow", "f", false, "keep printing lines as the container writes them (across log rotations) until it stops")
	f.BoolVarP(&opts.Previous, "previous", "p", false, "print the log of the container's previous instance")
	f.DurationVar(&since, "since", 0, "only lines newer than this, e.g. 10s or 5m (default: all)")
	f.BoolVar(&opts.Timestamps, "timestamps", false, "prefix each line with its RFC 3339 timestamp")
	return cmd
}

// execUsage is the error for an exec command line without "NAME -- CMD".
const execUsage = "usage: nodeguard pod exec NAME [-c CONTAINER] [-i] [-t] -- COMMAND [ARG...]"

func (p *podCLI) execCmd() *cobra.Command {
	var namespace, container string
	var timeout time.Duration
	var f sessionFlags
	cmd := &cobra.Command{
		Use:   "exec NAME [-c CONTAINER] [-i] [-t] -- COMMAND [ARG...]",
		Short: "Run a command in a container; exit with its exit code",
		Long: `Runs COMMAND (an argv, not a shell line) in the container and exits with its
exit code (codes outside 1-255 exit 255).

Without -i and -t it prints the command's stdout and stderr when it ends,
and --timeout kills it. With -i (stdin sent to the command, its end closing
the command's stdin) or -t (a terminal: with -i on a terminal, raw mode and
resizes, as kubectl exec -it), it is a session through the runtime's
streaming server, printing output as it comes, until the command ends.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 || len(args) < 2 {
				return errors.New(execUsage)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c := p.client()
			defer c.Close()
			if f.stdin || f.tty {
				if cmd.Flags().Changed("timeout") {
					return errors.New("--timeout with -i or -t: an interactive command runs until it ends; end it with ^C or ^D")
				}
				return f.run(cmd, func(ctx context.Context, sio api.StreamIO) error {
					return c.ExecStream(ctx, namespace, args[0], container, args[1:], sio)
				})
			}
			res, err := c.Exec(cmd.Context(), namespace, args[0], container, args[1:], timeout)
			if err != nil {
				return err
			}
			if _, err := cmd.OutOrStdout().Write(res.Stdout); err != nil {
				return fmt.Errorf("write stdout: %w", err)
			}
			if _, err := cmd.ErrOrStderr().Write(res.Stderr); err != nil {
				return fmt.Errorf("write stderr: %w", err)
			}
			if res.ExitCode != 0 {
				code := int(res.ExitCode)
				if code < 1 || code > 255 {
					code = 255 // an exit status is one byte: 256 would read as success
				}
				return &exitError{code: code, msg: fmt.Sprintf("command terminated with exit code %d", res.ExitCode)}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", podspec.DefaultNamespace, "the pod's namespace")
	cmd.Flags().StringVarP(&container, "container", "c", "", "container name (default: the pod's default container)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, fmt.Sprintf("kill the command after this long (whole seconds; 0 for the agent's maximum, %v); not with -i or -t", api.MaxExecTimeout))
	f.add(cmd, "send stdin to the command; its end closes the command's stdin")
	return cmd
}

func checkOutput(o string) error {
	switch o {
	case "", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--output %q: want json or yaml", o)
}

// printObject prints a v1 object as kubectl does: JSON indented by four
// spaces, or YAML.
func printObject(w io.Writer, format string, v any) error {
	var b []byte
	var err error
	if format == "yaml" {
		b, err = yaml.Marshal(v)
	} else {
		b, err = json.MarshalIndent(v, "", "    ")
		b = append(b, '\n')
	}
	if err != nil {
		return fmt.Errorf("encode %s: %w", format, err)
	}
	_, err = w.Write(b)
	return err
}

// printPodTable prints kubectl's pod columns plus IP and QOS.
func printPodTable(w io.Writer, pods []corev1.Pod, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tREADY\tSTATUS\tRESTARTS\tAGE\tIP\tQOS")
	for i := range pods {
		pod := &pods[i]
		r := podRow(pod, now)
		ip := pod.Status.PodIP
		if ip == "" {
			ip = "<none>"
		}
		qc := pod.Status.QOSClass
		if qc == "" {
			qc = qos.Class(pod)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\t%s\n",
			pod.Namespace, pod.Name, r.ready, r.total, r.status, r.restarts, age(pod.CreationTimestamp, now), ip, qc)
	}
	return tw.Flush()
}

// row is what printPodTable derives from a pod's status.
type row struct {
	// ready of total containers: the app containers and the sidecars.
	ready, total int
	status       string
	restarts     string
}

// podRow derives READY, STATUS and RESTARTS as kubectl's printPod does
// (k8s.io/kubernetes/pkg/printers/internalversion), sidecar init
// containers included (they count in READY; once the pod is initialized
// RESTARTS is theirs plus the app containers'), without its case for
// unreachable nodes.
func podRow(pod *corev1.Pod, now time.Time) row {
	st := &pod.Status
	reason := string(st.Phase)
	if st.Reason != "" {
		reason = st.Reason
	}
	restarts, sidecarRestarts := 0, 0
	var lastRestart, lastSidecarRestart metav1.Time
	note := func(n *int, last *metav1.Time, c *corev1.ContainerStatus) {
		*n += int(c.RestartCount)
		if t := c.LastTerminationState.Terminated; t != nil && last.Before(&t.FinishedAt) {
			*last = t.FinishedAt
		}
	}
	noteRestart := func(c *corev1.ContainerStatus) { note(&restarts, &lastRestart, c) }
	sidecars := map[string]bool{}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; qos.IsSidecar(pod, c) {
			sidecars[c.Name] = true
		}
	}

	ready, initializing := 0, false
	for i := range st.InitContainerStatuses {
		c := &st.InitContainerStatuses[i]
		noteRestart(c)
		if sidecars[c.Name] {
			note(&sidecarRestarts, &lastSidecarRestart, c)
		}
		switch {
		case c.State.Terminated != nil && c.State.Terminated.ExitCode == 0:
			continue
		case sidecars[c.Name] && c.Started != nil && *c.Started:
			if c.Ready {
				ready++
			}
			continue
		case c.State.Terminated != nil:
			reason = "Init:" + terminatedReason(c.State.Terminated)
		case c.State.Waiting != nil && c.State.Waiting.Reason != "" && c.State.Waiting.Reason != "PodInitializing":
			reason = "Init:" + c.State.Waiting.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
		}
		initializing = true
		break
	}

	if !initializing || initializedCondition(st) {
		restarts, lastRestart = sidecarRestarts, lastSidecarRestart
		hasRunning := false
		for i := len(st.ContainerStatuses) - 1; i >= 0; i-- {
			c := &st.ContainerStatuses[i]
			noteRestart(c)
			switch {
			case c.State.Waiting != nil && c.State.Waiting.Reason != "":
				reason = c.State.Waiting.Reason
			case c.State.Terminated != nil:
				reason = terminatedReason(c.State.Terminated)
			case c.Ready && c.State.Running != nil:
				hasRunning = true
				ready++
			}
		}
		// A pod whose last container completed but another still runs.
		if reason == "Completed" && hasRunning {
			reason = "NotReady"
			for _, cond := range st.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					reason = "Running"
				}
			}
		}
	}
	if pod.DeletionTimestamp != nil {
		reason = "Terminating"
	}

	rs := fmt.Sprint(restarts)
	if restarts > 0 && !lastRestart.IsZero() {
		rs = fmt.Sprintf("%d (%s ago)", restarts, age(lastRestart, now))
	}
	return row{ready: ready, total: len(pod.Spec.Containers) + len(sidecars), status: reason, restarts: rs}
}

func initializedCondition(st *corev1.PodStatus) bool {
	for _, c := range st.Conditions {
		if c.Type == corev1.PodInitialized {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func terminatedReason(t *corev1.ContainerStateTerminated) string {
	switch {
	case t.Reason != "":
		return t.Reason
	case t.Signal != 0:
		return fmt.Sprintf("Signal:%d", t.Signal)
	}
	return fmt.Sprintf("ExitCode:%d", t.ExitCode)
}

// age is kubectl's translateTimestampSince.
func age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}
