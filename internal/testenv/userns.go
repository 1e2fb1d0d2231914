package testenv

import (
	"fmt"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// nsGetOwnerUID is NS_GET_OWNER_UID, _IO(0xb7, 0x4).
const nsGetOwnerUID = 0xb704

// UserNSOwner returns the uid that owns the user namespace of process
// pid, as this process's namespace sees it (the uid the kernel charges
// that namespace's per-user counts to).
func UserNSOwner(t testing.TB, pid int) uint32 {
	t.Helper()
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("user namespace of %d: %v", pid, err)
	}
	defer unix.Close(fd)
	var uid uint32
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), nsGetOwnerUID, uintptr(unsafe.Pointer(&uid))); e != 0 {
		t.Fatalf("NS_GET_OWNER_UID of %d: %v", pid, e)
	}
	return uid
}
