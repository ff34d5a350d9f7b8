package builder

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/ironcore-dev/os-builder/builder/graph"
)

// Plan is a build's graph as `builder build --plan` shows it, without
// running a step.
type Plan struct {
	Recipe string `json:"recipe"`
	Output string `json:"output"`
	// InputKey is the build's input key; UpToDate: the output directory
	// already holds this build's output, so a build would write nothing.
	InputKey string     `json:"inputKey"`
	UpToDate bool       `json:"upToDate"`
	Steps    []PlanStep `json:"steps"`
}

// PlanStep is one step of a Plan.
type PlanStep struct {
	Step string   `json:"step"`
	Deps []string `json:"deps"`
	// Key is the step's cache key, "" while it depends on the output of a
	// step that has to run first.
	Key string `json:"key,omitempty"`
	// Cache is hit, miss, pending (the key needs the output of a step that
	// misses), write (an artifact writer that runs), reuse (an artifact
	// writer whose files the previous output has, made from the same
	// inputs) or no-cache.
	Cache  string `json:"cache"`
	Jobs   int    `json:"jobs"`
	MemMiB int    `json:"memMiB"`
}

// PlanBuild works out each lane's graph, each step's cache key and whether
// the cache holds it: the key of a step that reads another's output is
// computed from the cached output. Nothing is built or written. The plans
// are in lanes' order.
func PlanBuild(ctx context.Context, lanes ...Lane) ([]*Plan, error) {
	var plans []*Plan
	for _, l := range lanes {
		p, err := l.withDefaults().plan(ctx)
		if err != nil {
			return nil, err
		}
		plans = append(plans, p)
	}
	return plans, nil
}

// plan is PlanBuild of one lane.
func (l Lane) plan(ctx context.Context) (*Plan, error) {
	r, opts := l.Recipe, l.Options
	opts.Progress = nil
	b, err := prepare(ctx, r, opts)
	if err != nil {
		return nil, err
	}
	defer b.log.Close()
	p := &Plan{Recipe: r.Name, Output: b.opts.OutputDir, InputKey: b.key}
	var prev *previousOutput
	if !b.opts.NoCache {
		if _, p.UpToDate, err = upToDate(b.opts.OutputDir, b.key, b.store, b.opts.Verify, false); err != nil {
			return nil, err
		}
		if final, err := filepath.Abs(b.opts.OutputDir); err == nil {
			prev = readPreviousOutput(b.store, final)
		}
	}
	ns, _ := b.table("")
	g := graph.New()
	byName := map[string]node{}
	for _, n := range ns {
		if err := g.Add(graph.Node{Name: n.name, Deps: n.deps()}); err != nil {
			return nil, err
		}
		byName[n.name] = n
	}
	order, err := g.Order()
	if err != nil {
		return nil, err
	}
	resolved := map[string]bool{}
	for _, gn := range order {
		n := byName[gn.Name]
		ps := PlanStep{Step: n.name, Deps: n.deps(), Jobs: max(n.jobs, 1), MemMiB: n.mem}
		if ps.Deps == nil {
			ps.Deps = []string{}
		}
		ready := true
		for _, d := range ps.Deps {
			ready = ready && resolved[d]
		}
		switch {
		case n.writer != nil:
			ps.Cache = "write"
			if !ready {
				break
			}
			resolved[n.name] = true // its key is made of resolved outputs
			if w := n.writer; !b.opts.NoCache && len(w.Ships) > 0 {
				key, err := w.Key()
				if err != nil {
					return nil, fmt.Errorf("%s: %w", n.name, err)
				}
				ps.Key = key
				if prev.has(key, w.Ships) {
					ps.Cache = "reuse"
				}
			}
		case !ready:
			ps.Cache = "pending"
		default:
			s, err := n.step()
			if err != nil {
				return nil, err
			}
			in, err := s.Inputs()
			if err != nil {
				return nil, fmt.Errorf("%s: inputs: %w", n.name, err)
			}
			ps.Key = in.Key()
			dir, hit := b.store.Lookup(ps.Key)
			switch {
			case b.opts.NoCache:
				ps.Cache = "no-cache"
			case hit:
				if err := n.done(s, dir); err != nil {
					return nil, fmt.Errorf("%s: %w", n.name, err)
				}
				ps.Cache, resolved[n.name] = "hit", true
			default:
				ps.Cache = "miss"
			}
		}
		p.Steps = append(p.Steps, ps)
	}
	return p, nil
}

// WriteText prints the plan as a table.
func (p *Plan) WriteText(w io.Writer) error {
	state := "runs"
	if p.UpToDate {
		state = "up to date: nothing to do"
	}
	fmt.Fprintf(w, "recipe %s -> %s (input key %.12s, %s)\n", p.Recipe, p.Output, p.InputKey, state)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tCACHE\tKEY\tJOBS\tMEM\tDEPS")
	for _, s := range p.Steps {
		key := s.Key
		if len(key) > 16 {
			key = key[:16] // --json has it whole
		}
		if key == "" {
			key = "-"
		}
		deps := strings.Join(s.Deps, ",")
		if deps == "" {
			deps = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%dM\t%s\n", s.Step, s.Cache, key, s.Jobs, s.MemMiB, deps)
	}
	return tw.Flush()
}
