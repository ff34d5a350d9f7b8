package boot

import (
	"github.com/ironcore-dev/os-builder/internal/atomicfile"

	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Condition types the driver reports. They follow the metav1.Condition shape
// (Type, Status, Reason, Message) so a consumer can copy them into its API.
const (
	ConditionArtifactsPublished = "ArtifactsPublished"
	ConditionOverrideSet        = "BootOverrideSet"
	ConditionMediaInserted      = "VirtualMediaInserted"
	ConditionPowerActionIssued  = "PowerActionIssued"
	ConditionBooted             = "Booted"
	ConditionNetworkBootedOnce  = "NetworkBootedOnce"
	ConditionDiskPinned         = "DiskPinned"
)

// Condition status values.
const (
	ConditionTrue    = "True"
	ConditionFalse   = "False"
	ConditionUnknown = "Unknown"
)

// Condition is one observation about the boot.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason"`
	Message            string    `json:"message,omitempty"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
}

// State is what the caller persists between runs (JSON), so a re-run resumes
// where the previous one stopped instead of starting over.
type State struct {
	// PlanDigest is the plan this state belongs to; a different plan starts
	// from the first step.
	PlanDigest string `json:"planDigest,omitempty"`
	// Done counts the plan steps completed, in order.
	Done int `json:"done"`
	// NetworkBooted is set once a network boot was issued under
	// NetworkBootOnce; later runs with this state never network-boot again.
	NetworkBooted bool `json:"networkBooted,omitempty"`
	// AttemptStarted is when the current boot attempt's power action was
	// issued: boot evidence counts only what the machine did after it. A
	// boot token is the same for every attempt (a resumed plan keeps its
	// URLs), so without it a fetch of an earlier attempt, or by anyone who
	// saw the URL, would pass for this one's. Kept here so a run resumed
	// at wait-evidence waits for the same attempt.
	AttemptStarted time.Time   `json:"attemptStarted,omitzero"`
	Conditions     []Condition `json:"conditions,omitempty"`
}

// SetCondition adds or updates a condition; LastTransitionTime changes only
// when the status does.
func (s *State) SetCondition(c Condition, now time.Time) {
	for i := range s.Conditions {
		if s.Conditions[i].Type == c.Type {
			if s.Conditions[i].Status == c.Status {
				c.LastTransitionTime = s.Conditions[i].LastTransitionTime
			} else {
				c.LastTransitionTime = now
			}
			s.Conditions[i] = c
			return
		}
	}
	c.LastTransitionTime = now
	s.Conditions = append(s.Conditions, c)
}

// Condition returns the condition of the given type.
func (s *State) Condition(t string) (Condition, bool) {
	for _, c := range s.Conditions {
		if c.Type == t {
			return c, true
		}
	}
	return Condition{}, false
}

// ErrInvalidState marks a state that cannot belong to any run of the
// driver (hand-edited, corrupt, or from another plan).
var ErrInvalidState = errors.New("invalid boot state")

// maxStateSize bounds a state file before it is read: a real one is a few
// KiB (a digest, a counter, a handful of conditions).
const maxStateSize = 1 << 20

// LoadState reads a state file; a missing file is an empty state. The state
// is checked on its own (see ParseState); Driver.Run checks it against the
// plan.
func LoadState(path string) (*State, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return &State{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading boot state: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxStateSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading boot state %s: %w", path, err)
	}
	if len(b) > maxStateSize {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalidState, path, maxStateSize)
	}
	s, err := ParseState(b)
	if err != nil {
		return nil, fmt.Errorf("boot state %s: %w", path, err)
	}
	return s, nil
}

// ParseState decodes a state (JSON) and checks what it says on its own: a
// step count that is not negative, and a plan digest that is one (a state
// with steps done but no plan is corrupt).
func ParseState(b []byte) (*State, error) {
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidState, err)
	}
	if s.Done < 0 {
		return nil, fmt.Errorf("%w: done = %d, must not be negative", ErrInvalidState, s.Done)
	}
	if s.PlanDigest == "" && s.Done != 0 {
		return nil, fmt.Errorf("%w: done = %d without a planDigest", ErrInvalidState, s.Done)
	}
	if s.PlanDigest != "" && !isPlanDigest(s.PlanDigest) {
		return nil, fmt.Errorf("%w: planDigest %q is not sha256:<64 hex digits>", ErrInvalidState, s.PlanDigest)
	}
	return &s, nil
}

// Validate checks the state against the plan it is about to drive: for the
// same plan, done must lie within [0, len(steps)]. A state of another plan
// is valid: Run starts that plan from its first step.
func (s *State) Validate(p *Plan) error {
	if s.Done < 0 {
		return fmt.Errorf("%w: done = %d, must not be negative", ErrInvalidState, s.Done)
	}
	if s.PlanDigest == "" && s.Done != 0 {
		return fmt.Errorf("%w: done = %d without a planDigest", ErrInvalidState, s.Done)
	}
	if s.PlanDigest == p.Digest() && s.Done > len(p.Steps) {
		return fmt.Errorf("%w: done = %d, but plan %s has %d steps", ErrInvalidState, s.Done, s.PlanDigest, len(p.Steps))
	}
	return nil
}

func isPlanDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

// SaveState writes a state file atomically (temp file + rename), so a crash
// mid-write never leaves a truncated state behind.
func SaveState(path string, s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("saving boot state: %w", err)
	}
	return nil
}
