package kubepods

import "golang.org/x/sys/unix"

const syscallEBUSY = unix.EBUSY
