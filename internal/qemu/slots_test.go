package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// holderEnv makes the test binary a process that holds one slot until it
// is killed: the other process the cap is shared with.
const holderEnv = "OSB_TEST_SLOT_HOLDER"

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		s, err := acquireSlot(context.Background())
		if err != nil || s == nil {
			println("holder:", err)
			os.Exit(1)
		}
		os.Stdout.WriteString("held\n")
		select {} // until killed
	}
	os.Exit(m.Run())
}

// oneSlot gives the test a machine of its own with one slot, held by
// another process until the returned kill is called (SIGKILL: no
// clean-up runs, the kernel must free the slot).
func oneSlot(t *testing.T) (kill func()) {
	t.Helper()
	t.Setenv(SlotsEnv, "1")
	t.Setenv(SlotsDirEnv, t.TempDir())
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		cmd.Process.Kill()
		t.Fatalf("holder said %q", line)
	}
	var once sync.Once // a test's timer and its clean-up both kill
	kill = func() { once.Do(func() { cmd.Process.Kill(); cmd.Wait() }) }
	t.Cleanup(kill)
	return kill
}

func TestSlotsAcrossProcesses(t *testing.T) {
	kill := oneSlot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	if s, err := acquireSlot(ctx); !errors.Is(err, context.DeadlineExceeded) {
		s.release()
		t.Fatalf("acquired the slot another process holds: %v", err)
	}
	kill()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := acquireSlot(ctx)
	if err != nil {
		t.Fatalf("slot not freed by the killed holder: %v", err)
	}
	s.release()
}

func TestSlotsEnv(t *testing.T) {
	t.Setenv(SlotsDirEnv, t.TempDir())
	t.Setenv(SlotsEnv, "0")
	if s, err := acquireSlot(context.Background()); s != nil || err != nil {
		t.Errorf("0 slots: got %v, %v; want no cap", s, err)
	}
	t.Setenv(SlotsEnv, "two")
	if _, err := acquireSlot(context.Background()); err == nil || !strings.Contains(err.Error(), SlotsEnv) {
		t.Errorf("bad count: got %v, want an error naming $%s", err, SlotsEnv)
	}
}

// TestStartWaitsForSlot: a guest starts only once the machine has room,
// and its boot record says how long it waited and who started it.
func TestStartWaitsForSlot(t *testing.T) {
	needQEMU(t)
	kill := oneSlot(t)
	logPath := filepath.Join(t.TempDir(), "boots.jsonl")
	t.Setenv(BootLogEnv, logPath)
	time.AfterFunc(time.Second, kill)
	// No kernel at that path: QEMU starts and exits at once, which is all
	// the wiring needs.
	vm, err := Start(context.Background(), Config{Kernel: "/nonexistent/vmlinuz", Initrd: "/nonexistent/initrd.img"})
	if err != nil {
		t.Fatal(err)
	}
	<-vm.Done()
	vm.Stop()
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var r BootRecord
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("boot log %q: %v", data, err)
	}
	want := BootRecord{Test: "internal/qemu.TestStartWaitsForSlot", Arch: "amd64", Firmware: "seabios+kernel", Artifact: "nonexistent/vmlinuz nonexistent/initrd.img", Outcome: "exited"}
	if r.Waited < 0.9 {
		t.Errorf("waited %.1fs for the slot, want about 1s", r.Waited)
	}
	r.Waited, r.Ran = 0, 0
	if r != want {
		t.Errorf("boot record\n got %+v\nwant %+v", r, want)
	}
}

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		cfg                     Config
		firmware, artifact, arc string
	}{
		{Config{UEFI: true, Disks: []string{"/out/test/disk.raw"}}, "ovmf", "test/disk.raw", "amd64"},
		{Config{UEFI: true, SecureBoot: true, CDROM: "/o/image.iso"}, "ovmf-secureboot", "o/image.iso", "amd64"},
		{Config{UEFI: true, Net: &NetConfig{BootFile: "http://10.0.2.2:8080/a/uki.efi?t=1", NoROM: true}}, "ovmf+http", "a/uki.efi", "amd64"},
		{Config{Machine: "pc", Net: &NetConfig{BootFile: "http://10.0.2.2/boot.ipxe", ROMFile: "/usr/lib/ipxe/qemu/pxe-virtio.rom"}}, "seabios+ipxe", "boot.ipxe", "amd64"},
		{Config{Machine: "pc", Net: &NetConfig{BootFile: "http://10.0.2.2/ipxe"}}, "seabios+ipxe", "ipxe", "amd64"},
		{Config{UEFI: true, Net: &NetConfig{BootFile: "pxelinux.0", TFTPDir: "/t", NoROM: true}}, "ovmf+pxe", "pxelinux.0", "amd64"},
		{Config{Arch: "arm64", UEFI: true, Kernel: "/o/vmlinuz", Initrd: "/o/initrd.img", Disks: []string{"/d"}}, "aavmf+kernel", "o/vmlinuz o/initrd.img d", "arm64"},
	} {
		r := tc.cfg.describe()
		if r.Firmware != tc.firmware || r.Artifact != tc.artifact || r.Arch != tc.arc {
			t.Errorf("%+v: got %s / %s / %s, want %s / %s / %s", tc.cfg, r.Firmware, r.Artifact, r.Arch, tc.firmware, tc.artifact, tc.arc)
		}
		if r.Test != "internal/qemu.TestDescribe" {
			t.Errorf("test %q, want internal/qemu.TestDescribe", r.Test)
		}
	}
}

// TestSlotWaitNotCounted: a guest that waited for its slot gets its
// deadlines moved by the wait: Start's (QEMU is not killed at the old
// deadline) and WaitFor's.
func TestSlotWaitNotCounted(t *testing.T) {
	needQEMU(t)
	kill := oneSlot(t)
	time.AfterFunc(1500*time.Millisecond, kill)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// SeaBIOS with nothing to boot keeps running.
	vm, err := Start(ctx, Config{MemoryMB: 128, FailureMarkers: []string{}})
	if err != nil {
		t.Fatalf("Start gave up at its context's deadline: %v", err)
	}
	defer vm.Stop()
	if ctx.Err() == nil {
		t.Fatal("the slot came before the deadline: nothing tested")
	}
	// The old deadline has passed; the moved one (about 1.5 s from the
	// guest's start) has not.
	time.Sleep(200 * time.Millisecond)
	select {
	case <-vm.Done():
		t.Fatalf("QEMU killed at the old deadline: %v", vm.ExitErr())
	default:
	}
	start := time.Now()
	_, err = vm.WaitFor(ctx, "never printed")
	if waited := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || waited < 500*time.Millisecond {
		t.Fatalf("WaitFor returned %v after %v: want the moved deadline, about 1 s on", err, waited)
	}
}

// TestSlotWaitCanceled: an explicit cancel still ends the wait.
func TestSlotWaitCanceled(t *testing.T) {
	oneSlot(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	if _, err := Start(ctx, Config{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want the cancel", err)
	}
}

// TestReserve: a reservation is the slot the process's next guest uses
// (no wait while the one slot is reserved), given back when the guest
// ends, and freed for other processes on release.
func TestReserve(t *testing.T) {
	needQEMU(t)
	t.Setenv(SlotsEnv, "1")
	t.Setenv(SlotsDirEnv, t.TempDir())
	release, err := Reserve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		// Started off the test's stack, as a BMC emulator starts it.
		started := make(chan *VM)
		go func() {
			vm, err := Start(ctx, Config{Kernel: "/nonexistent/vmlinuz"})
			if err != nil {
				t.Error(err)
			}
			started <- vm
		}()
		vm := <-started
		if vm == nil {
			cancel()
			t.FailNow()
		}
		<-vm.Done()
		vm.Stop()
		cancel()
		if vm.record.Test != "internal/qemu.TestReserve" {
			t.Errorf("guest %d logged as %q", i, vm.record.Test)
		}
		if vm.record.Waited > 0.5 {
			t.Errorf("guest %d waited %.1fs with a reservation", i, vm.record.Waited)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	if s, err := acquireSlot(ctx); err == nil {
		s.release()
		t.Error("the reserved slot was free to others before release")
	}
	cancel()
	release()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := acquireSlot(ctx)
	if err != nil {
		t.Fatalf("not freed by release: %v", err)
	}
	s.release()
}
