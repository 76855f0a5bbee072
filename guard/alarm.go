//go:build linux

package guard

import (
	"encoding/binary"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// alarm fires at an absolute CLOCK_MONOTONIC time, the clock of the
// protocol's kill points. It is a timerfd read through the runtime's
// poller: moving it is one timerfd_settime, so a kill point moved later
// leaves no earlier wake-up behind (a Go timer moved by Reset can still
// wake the process at its old time), and between messages the guard has
// no timer of its own at all.
type alarm struct {
	c    chan struct{}
	set  func(at int64)
	stop func()
}

// newAlarm returns an unarmed alarm: a timerfd when the kernel has one,
// else a Go timer.
func newAlarm() *alarm {
	a := &alarm{c: make(chan struct{}, 1)}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		t := time.AfterFunc(time.Hour, a.fire)
		t.Stop()
		a.set = func(at int64) { t.Reset(time.Duration(at - MonoNow())) }
		a.stop = func() { t.Stop() }
		return a
	}
	f := os.NewFile(uintptr(fd), "kill-point")
	a.set = func(at int64) {
		if at <= 0 {
			at = 1 // zero would disarm it
		}
		spec := unix.ItimerSpec{Value: unix.NsecToTimespec(at)}
		// Raw, as rawReader's reads: timerfd_settime never blocks, and a
		// syscall the scheduler sees would wake its monitor thread at
		// every extend.
		_, _, _ = unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, uintptr(fd), unix.TFD_TIMER_ABSTIME, uintptr(unsafe.Pointer(&spec)), 0, 0, 0)
	}
	a.stop = func() { _ = f.Close() }
	go func() {
		buf := make([]byte, 8)
		for {
			if _, err := f.Read(buf); err != nil {
				return // closed
			}
			if binary.NativeEndian.Uint64(buf) > 0 {
				a.fire()
			}
		}
	}()
	return a
}

// fire reports the alarm once; a report not yet taken is enough.
func (a *alarm) fire() {
	select {
	case a.c <- struct{}{}:
	default:
	}
}
