package qemu

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// BootLogEnv names a file every guest appends one BootRecord to (JSON, a
// line each) when it ends: make test prints the suite's boots from it.
const BootLogEnv = "OSB_BOOT_LOG"

// BootRecord is one guest's life, as the suite's timing table shows it.
type BootRecord struct {
	// Test is the test function that started the guest
	// ("pkg.TestX/sub" as far as the stack tells), or the program.
	Test string `json:"test"`
	Arch string `json:"arch"`
	// Firmware is the boot path: "ovmf", "ovmf-secureboot", "seabios",
	// "aavmf", with "+kernel" for a direct kernel boot, "+http" for UEFI
	// HTTP boot, "+ipxe" for an iPXE ROM, "+pxe" for TFTP.
	Firmware string `json:"firmware"`
	// Artifact is what was booted: the kernel, disks, CD and network boot
	// file, each as its last two path elements ("test/uki.efi": the
	// output directory tells the test image from the hypervisor).
	Artifact string `json:"artifact"`
	// Waited is the time spent for a free slot, Ran the guest's life.
	Waited float64 `json:"waitedSeconds"`
	Ran    float64 `json:"ranSeconds"`
	// Outcome is "exited" (QEMU ended by itself, e.g. a guest reboot
	// under NoReboot) or "stopped" (killed by the test once done).
	Outcome string `json:"outcome"`
}

// describe fills the record's static fields from cfg.
func (cfg *Config) describe() BootRecord {
	r := BootRecord{Arch: cfg.Arch, Test: callerTest()}
	if r.Arch == "" {
		r.Arch = "amd64"
	}
	switch {
	case r.Arch == "arm64":
		r.Firmware = "aavmf"
	case cfg.SecureBoot:
		r.Firmware = "ovmf-secureboot"
	case cfg.UEFI:
		r.Firmware = "ovmf"
	default:
		r.Firmware = "seabios"
	}
	var art []string
	if cfg.Kernel != "" {
		r.Firmware += "+kernel"
		art = append(art, lastTwo(cfg.Kernel))
		if cfg.Initrd != "" {
			art = append(art, lastTwo(cfg.Initrd))
		}
	}
	for _, d := range cfg.Disks {
		art = append(art, lastTwo(d))
	}
	if cfg.CDROM != "" {
		art = append(art, lastTwo(cfg.CDROM))
	}
	if n := cfg.Net; n != nil && n.BootFile != "" {
		switch {
		case n.ROMFile != "" && !n.NoROM, !cfg.UEFI && r.Arch == "amd64":
			// SeaBIOS boots the network only through the NIC's iPXE ROM
			// (QEMU's own when ROMFile is empty).
			r.Firmware += "+ipxe"
		case strings.HasPrefix(n.BootFile, "http"):
			r.Firmware += "+http"
		default:
			r.Firmware += "+pxe"
		}
		art = append(art, bootFileName(n.BootFile))
	}
	r.Artifact = strings.Join(art, " ")
	return r
}

// bootFileName is the last two elements of a boot file's path or URL.
func bootFileName(s string) string {
	if u, err := url.Parse(s); err == nil && u.Path != "" {
		s = u.Path
	}
	return lastTwo(s)
}

// lastTwo is "dir/file" of a path ("file" at the root).
func lastTwo(p string) string {
	p = path.Clean(p)
	dir, file := path.Split(p)
	if d := path.Base(dir); d != "/" && d != "." {
		return d + "/" + file
	}
	return file
}

// callerTest names the outermost test function on the caller's stack:
// the table is read per test, and qemu.Start is called from helpers.
func callerTest() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	name := ""
	for {
		f, more := frames.Next()
		// "example.com/mod/pkg.TestX.func1": the package path ends at the
		// first dot after the last slash.
		slash := strings.LastIndex(f.Function, "/") + 1
		if dot := strings.Index(f.Function[slash:], "."); dot >= 0 {
			pkg, fn := f.Function[:slash+dot], f.Function[slash+dot+1:]
			if strings.HasPrefix(fn, "Test") || strings.HasPrefix(fn, "Benchmark") {
				fn, _, _ = strings.Cut(fn, ".") // a subtest's closure names its test
				// An external test package (pkg_test) is its package's.
				name = strings.TrimSuffix(strings.TrimPrefix(pkg, module+"/"), "_test") + "." + fn
			}
		}
		if !more {
			break
		}
	}
	if name == "" {
		return filepath.Base(os.Args[0])
	}
	return name
}

// module is trimmed from the names in the boot log.
const module = "github.com/ironcore-dev/os-builder"

// appendBootRecord adds r to the file named by BootLogEnv, if set. One
// write under an exclusive lock: processes append to the same file.
func appendBootRecord(r BootRecord) error {
	p := os.Getenv(BootLogEnv)
	if p == "" {
		return nil
	}
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("qemu: boot log: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("qemu: boot log: %w", err)
	}
	_, err = f.Write(append(line, '\n'))
	return err
}

func seconds(d time.Duration) float64 {
	return float64(d.Round(100*time.Millisecond)) / float64(time.Second)
}
