package boot

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/osimage/osimagetest"
)

// TestSessionSaysV2Preferred: an image whose index holds v1 and IronCore
// Image V2 manifests boots the EFI kind's executable over UEFI HTTP, and
// the session says in one log line that V2 was preferred.
func TestSessionSaysV2Preferred(t *testing.T) {
	dir := t.TempDir()
	if _, err := osimagetest.WriteOutputDir(dir, "amd64"); err != nil {
		t.Fatal(err)
	}
	idx, err := osimage.NewIndexFromDirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	id, err := osimage.ReadIndexIdentity(idx, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	pub := &sessionPublisher{}
	s := &Session{
		Request:   Request{Image: testImage},
		Images:    KnownBuilds{id},
		Artifacts: sessionArtifacts{serve: func(_ *Plan, d *Driver) error { d.Publisher = pub; return nil }},
		Dialer:    OpenedBMC{&sessionBMC{caps: Capabilities{ContinuousSupported: true, VirtualMediaCD: true, InstructionSet: "x86-64"}}},
		Logf:      func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) },
	}
	res, err := s.Boot(t.Context(), &State{})
	if err != nil {
		t.Fatal(err)
	}
	var said []string
	for _, l := range logs {
		if strings.HasPrefix(l, "image: IronCore Image V2 preferred over v1 for linux/amd64: ") && strings.Contains(l, "uki from the EFI kind") {
			said = append(said, l)
		}
	}
	if len(said) != 1 {
		t.Errorf("log lines saying V2 was preferred: %q (of %q), want one", said, logs)
	}
	uki, _ := id.Artifact(osimage.KindUKI)
	if res.Plan.Method != osimage.BootUEFIHTTP || uki.MediaType != osimage.V2MediaTypeEFIExecutable {
		t.Errorf("booted %s from a %s layer", res.Plan.Method, uki.MediaType)
	}
	var text strings.Builder
	if err := res.Plan.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "/blobs/"+uki.Digest.String()+"/") {
		t.Errorf("the plan does not serve the EFI kind's executable %s:\n%s", uki.Digest, text.String())
	}
}
