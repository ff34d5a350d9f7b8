package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A TCG guest keeps a core busy from firmware to shutdown. go test runs
// packages in parallel processes, each with its own parallel tests, so
// without a machine-wide cap five guests shared two cores and timed out
// (soft lockups, firmware timeouts). Start therefore holds one slot for
// each guest: an exclusive flock on one of N files in a directory every
// process on the machine shares. QEMU inherits the locked file too, so an
// orphaned guest (its test killed with -9) counts until it exits, and the
// kernel drops the lock once neither holds it.
const (
	// SlotsEnv sets N, the guests allowed at once (default: the number of
	// CPUs; 0 lifts the cap).
	SlotsEnv = "OSB_QEMU_SLOTS"
	// SlotsDirEnv names the shared directory (default: $TMPDIR/osb-qemu-slots).
	SlotsDirEnv = "OSB_QEMU_SLOTS_DIR"
)

// Waiting for a slot is not the guest's time: Start waits past the
// deadline of its context (an explicit cancel still ends the wait), and the
// guest's deadlines, Start's and every WaitFor's, move by the time waited,
// so a test's boot timeout counts from the guest's start.

// slotPoll is how often a waiting Start tries the slots again.
const slotPoll = 250 * time.Millisecond

// slot is one held place; release frees it. A nil slot is no cap.
type slot struct {
	f        *os.File
	reserved *reservation // set when the slot is a test's reservation
}

func (s *slot) release() {
	if s == nil {
		return
	}
	if s.reserved != nil && s.reserved.giveBack() {
		return
	}
	s.f.Close() // closing drops the flock
}

// A reservation is a slot a test process holds before its guest exists:
// a test that starts its guest through something else (a BMC emulator's
// power-on, which the driver then waits on with clocks of its own)
// reserves the slot first, so the wait for a core comes before those
// clocks start. Start in that process takes a free reservation before it
// waits for a slot of its own, and gives it back when the guest ends.
type reservation struct {
	test     string // who reserved it: the boot log's name for its guests
	s        *slot
	inUse    bool // a guest holds the slot
	released bool // the test is done: close the slot when no guest holds it
}

// reservations are this process's reservations not in use; its mutex
// guards every reservation's fields (one lock: no order to get wrong).
var reservations = struct {
	sync.Mutex
	free []*reservation
}{}

// Reserve holds one guest slot for this process until release is called
// (waiting, like Start, past ctx's deadline but not its cancellation).
// With no cap in force it returns at once.
func Reserve(ctx context.Context) (release func(), err error) {
	s, err := waitSlot(ctx)
	if err != nil || s == nil {
		return func() {}, err
	}
	r := &reservation{s: s, test: callerTest()}
	s.reserved = r
	reservations.Lock()
	reservations.free = append(reservations.free, r)
	reservations.Unlock()
	return r.release, nil
}

// takeReservation returns a free reservation's slot, or nil.
func takeReservation() *slot {
	reservations.Lock()
	defer reservations.Unlock()
	n := len(reservations.free)
	if n == 0 {
		return nil
	}
	r := reservations.free[n-1]
	reservations.free = reservations.free[:n-1]
	r.inUse = true
	return r.s
}

// giveBack returns the slot to the free reservations when the guest ends;
// false when the reservation was released meanwhile (the slot closes).
func (r *reservation) giveBack() bool {
	reservations.Lock()
	defer reservations.Unlock()
	r.inUse = false
	if r.released {
		return false
	}
	reservations.free = append(reservations.free, r)
	return true
}

func (r *reservation) release() {
	reservations.Lock()
	defer reservations.Unlock()
	if r.released {
		return
	}
	r.released = true
	if r.inUse {
		return // the guest using it closes it when it ends
	}
	reservations.free = slices.DeleteFunc(reservations.free, func(x *reservation) bool { return x == r })
	r.s.f.Close()
}

// slotCount is the cap in force: SlotsEnv, else the CPUs.
func slotCount() (int, error) {
	v := os.Getenv(SlotsEnv)
	if v == "" {
		return runtime.NumCPU(), nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("qemu: $%s=%q: want a count of guests, 0 for no cap", SlotsEnv, v)
	}
	return n, nil
}

func slotsDir() string {
	if d := os.Getenv(SlotsDirEnv); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "osb-qemu-slots")
}

// waitSlot is acquireSlot past ctx's deadline: how Start and Reserve
// wait.
func waitSlot(ctx context.Context) (*slot, error) {
	ctx, stop := pastDeadline(ctx)
	defer stop()
	return acquireSlot(ctx)
}

// acquireSlot waits until one of the machine's slots is free and holds it,
// or ctx ends.
func acquireSlot(ctx context.Context) (*slot, error) {
	n, err := slotCount()
	if err != nil || n == 0 {
		return nil, err
	}
	dir := slotsDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("qemu: slots: %w", err)
	}
	for {
		for i := 0; i < n; i++ {
			s, err := trySlot(filepath.Join(dir, fmt.Sprintf("slot-%d", i)))
			if err != nil {
				return nil, err
			}
			if s != nil {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("qemu: waiting for one of %d guest slots in %s: %w", n, dir, context.Cause(ctx))
		case <-time.After(slotPoll):
		}
	}
}

// trySlot takes the slot at path if nobody holds it (nil, nil if somebody
// does).
func trySlot(path string) (*slot, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("qemu: slot: %w", err)
	}
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); {
	case err == nil:
		return &slot{f: f}, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		f.Close()
		return nil, nil
	default:
		f.Close()
		return nil, fmt.Errorf("qemu: slot %s: %w", path, err)
	}
}

// pastDeadline is ctx without its deadline: canceled only when ctx is
// canceled for another reason.
func pastDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
			cancel(err)
		}
	})
	return c, func() { stop(); cancel(nil) }
}

// shifted is ctx with its deadline moved by d (ctx itself when it has no
// deadline or d is 0); canceling ctx still cancels it.
func shifted(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok || d <= 0 {
		return ctx, func() {}
	}
	c, stop := pastDeadline(ctx)
	c, cancel := context.WithDeadline(c, deadline.Add(d))
	return c, func() { cancel(); stop() }
}
