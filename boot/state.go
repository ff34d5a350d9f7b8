package boot

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
	NetworkBooted bool        `json:"networkBooted,omitempty"`
	Conditions    []Condition `json:"conditions,omitempty"`
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

// LoadState reads a state file; a missing file is an empty state.
func LoadState(path string) (*State, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return &State{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading boot state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("parsing boot state %s: %w", path, err)
	}
	return &s, nil
}

// SaveState writes a state file atomically (temp file + rename), so a crash
// mid-write never leaves a truncated state behind.
func SaveState(path string, s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".bootstate-*")
	if err != nil {
		return fmt.Errorf("saving boot state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("saving boot state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("saving boot state: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("saving boot state: %w", err)
	}
	return nil
}
