package podcgroups

import "golang.org/x/sys/unix"

const syscallEBUSY = unix.EBUSY
