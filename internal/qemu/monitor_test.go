package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestMonitor drives a real QEMU over QMP: started paused, the NIC's cable
// is pulled and plugged back, a wrong NIC name is an error naming it, and
// Cont runs the CPUs.
func TestMonitor(t *testing.T) {
	needQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vm := startT(t, ctx, Config{MemoryMB: 128, Net: &NetConfig{NoROM: true}, Monitor: true, Paused: true,
		FailureMarkers: []string{}})
	mon, err := vm.Monitor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	status := func() string {
		t.Helper()
		b, err := mon.Execute(ctx, "query-status", nil)
		if err != nil {
			t.Fatal(err)
		}
		var s struct{ Status string }
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		return s.Status
	}
	if got := status(); got != "prelaunch" {
		t.Errorf("status before Cont = %q, want prelaunch", got)
	}
	if err := mon.SetLink(ctx, NICID, false); err != nil {
		t.Fatalf("SetLink off: %v", err)
	}
	if err := mon.SetLink(ctx, NICID, true); err != nil {
		t.Fatalf("SetLink on: %v", err)
	}
	if err := mon.SetLink(ctx, "no-such-nic", false); err == nil || !strings.Contains(err.Error(), "no-such-nic") {
		t.Errorf("SetLink on a missing NIC = %v, want an error naming it", err)
	}
	// cont's reply may follow a RESUME event: Execute must skip it.
	if err := mon.Cont(ctx); err != nil {
		t.Fatalf("Cont: %v", err)
	}
	if got := status(); got != "running" {
		t.Errorf("status after Cont = %q, want running", got)
	}
}

// TestMonitorNeedsConfig: Paused without Monitor is refused before a VM
// starts. (Monitor on a VM started without Config.Monitor is an error:
// TestOVMFShellIsFailure checks that on its VM.)
func TestMonitorNeedsConfig(t *testing.T) {
	needQEMU(t)
	if vm, err := Start(context.Background(), Config{Paused: true}); err == nil {
		vm.Stop()
		t.Error("Paused without Monitor started")
	}
}

func TestArgsMonitor(t *testing.T) {
	got := strings.Join((&Config{Monitor: true, Paused: true, Net: &NetConfig{}}).Args("/tmp/vm1/vars.fd"), " ")
	for _, want := range []string{"-qmp unix:/tmp/vm1/qmp.sock,server=on,wait=off", " -S", "virtio-net-pci,netdev=n0,id=" + NICID} {
		if !strings.Contains(got, want) {
			t.Errorf("args lack %q:\n%s", want, got)
		}
	}
	if got := strings.Join((&Config{}).Args("/tmp/vm1/vars.fd"), " "); strings.Contains(got, "-qmp") || strings.Contains(got, " -S") {
		t.Errorf("no monitor asked for, args: %s", got)
	}
}

func TestReadMessage(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"greeting", `{"QMP": {"version": {}, "capabilities": ["oob"]}}` + "\n", true},
		{"return", `{"return": {}}` + "\n", true},
		{"error", `{"error": {"class": "DeviceNotFound", "desc": "Device 'x' not found"}}` + "\n", true},
		{"event", `{"timestamp": {"seconds": 1}, "event": "RESUME"}` + "\r\n", true},
		{"none of them", `{"foo": 1}` + "\n", false},
		{"not json", "hello\n", false},
		{"cut off", `{"return": {}`, false},
		{"too long", `{"return": "` + strings.Repeat("x", maxQMPMessage) + `"}` + "\n", false},
	} {
		_, err := readMessage(bufio.NewReader(strings.NewReader(tc.in)))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// FuzzReadMessage: whatever QEMU's socket sends, reading it ends in a
// message or an error, within the size bound.
func FuzzReadMessage(f *testing.F) {
	for _, s := range []string{
		`{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}}, "capabilities": ["oob"]}}` + "\n",
		`{"return": {}}` + "\n",
		`{"error": {"class": "GenericError", "desc": "x"}}` + "\n",
		`{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "NIC_RX_FILTER_CHANGED", "data": {"path": "/x"}}` + "\n",
		"\n", "{}", `{"error": null, "return": null}` + "\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReaderSize(strings.NewReader(string(b)), 16)
		for range 64 {
			m, err := readMessage(r)
			if err != nil {
				return
			}
			if m.QMP == nil && m.Return == nil && m.Error == nil && m.Event == "" {
				t.Fatalf("accepted an empty message from %q", b)
			}
		}
	})
}
