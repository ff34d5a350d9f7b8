// Package graph runs a build as a graph of steps: each step names the steps
// whose outputs it reads, and a scheduler starts every step whose
// dependencies are done, as many at a time as a budget of job slots and
// memory allows. A failure cancels the steps still running and starts no
// more.
package graph

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Node is one step of the graph.
type Node struct {
	// Name identifies the node; Deps name the nodes it reads from.
	Name string
	Deps []string
	// Jobs is how many job slots it occupies while it runs (0 means 1): a
	// Go build or a squashfs write keeps a core busy.
	Jobs int
	// MemMiB is the memory it may need at its peak; 0 means negligible.
	MemMiB int
	// Run does the work. Its context is cancelled when another node fails.
	Run func(ctx context.Context) error
}

// Graph is a set of nodes in the order they were added; that order breaks
// ties between nodes ready at the same time, so runs are predictable.
type Graph struct {
	nodes  []*Node
	byName map[string]*Node
}

// New returns an empty graph.
func New() *Graph { return &Graph{byName: map[string]*Node{}} }

// Add adds n. Names are unique; dependencies may be added later.
func (g *Graph) Add(n Node) error {
	if n.Name == "" {
		return errors.New("graph: node without a name")
	}
	if _, dup := g.byName[n.Name]; dup {
		return fmt.Errorf("graph: two nodes named %q", n.Name)
	}
	g.nodes = append(g.nodes, &n)
	g.byName[n.Name] = &n
	return nil
}

// Node returns the node named name, or nil.
func (g *Graph) Node(name string) *Node { return g.byName[name] }

// Order returns the nodes dependencies first (Kahn's algorithm, ties in
// insertion order). It fails on an unknown dependency or a cycle.
func (g *Graph) Order() ([]*Node, error) {
	indeg := map[string]int{}
	users := map[string][]string{}
	for _, n := range g.nodes {
		for _, d := range n.Deps {
			if g.byName[d] == nil {
				return nil, fmt.Errorf("graph: %s depends on unknown step %q", n.Name, d)
			}
			indeg[n.Name]++
			users[d] = append(users[d], n.Name)
		}
	}
	var order []*Node
	done := map[string]bool{}
	for len(order) < len(g.nodes) {
		progressed := false
		for _, n := range g.nodes {
			if done[n.Name] || indeg[n.Name] > 0 {
				continue
			}
			done[n.Name] = true
			order = append(order, n)
			for _, u := range users[n.Name] {
				indeg[u]--
			}
			progressed = true
			break // restart: keep insertion order among the ready
		}
		if !progressed {
			var stuck []string
			for _, n := range g.nodes {
				if !done[n.Name] {
					stuck = append(stuck, n.Name)
				}
			}
			return nil, fmt.Errorf("graph: dependency cycle among %s", strings.Join(stuck, ", "))
		}
	}
	return order, nil
}

// Options bound a run.
type Options struct {
	// Jobs is the number of job slots; 0 or less means 1.
	Jobs int
	// MemMiB is the memory budget; 0 means unbounded. A node needing more
	// than the whole budget runs alone.
	MemMiB int
	// Start and Finish observe each node; they may be called concurrently.
	// A node never started (a dependency failed) gets neither.
	Start  func(name string)
	Finish func(name string, err error)
}

// NodeError is the failure of one node.
type NodeError struct {
	Node string
	Err  error
}

func (e *NodeError) Error() string { return e.Node + ": " + e.Err.Error() }
func (e *NodeError) Unwrap() error { return e.Err }

type result struct {
	n   *Node
	err error
}

// Run runs every node after its dependencies, concurrently within the
// budget. On the first failure it cancels the nodes running, starts no new
// ones, waits for the running ones to return and returns that failure as a
// *NodeError. When ctx is cancelled it returns ctx's error once every
// running node has returned.
func (g *Graph) Run(ctx context.Context, opts Options) error {
	order, err := g.Order()
	if err != nil {
		return err
	}
	jobs := max(opts.Jobs, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	waiting := map[string]int{}
	for _, n := range order {
		waiting[n.Name] = len(n.Deps)
	}
	users := map[string][]*Node{}
	for _, n := range order {
		for _, d := range n.Deps {
			users[d] = append(users[d], n)
		}
	}
	var ready []*Node
	for _, n := range g.nodes { // insertion order
		if waiting[n.Name] == 0 {
			ready = append(ready, n)
		}
	}
	results := make(chan result)
	usedJobs, usedMem, running, finished := 0, 0, 0, 0
	var first error
	fits := func(n *Node) bool {
		if running == 0 {
			return true // too big for the budget: alone
		}
		if usedJobs+slots(n, jobs) > jobs {
			return false
		}
		return opts.MemMiB <= 0 || usedMem+n.MemMiB <= opts.MemMiB
	}
	for {
		// Start what fits, in ready order; a node that does not fit yet
		// lets smaller ones behind it start.
		if first == nil && ctx.Err() == nil {
			for i := 0; i < len(ready); {
				n := ready[i]
				if !fits(n) {
					i++
					continue
				}
				ready = append(ready[:i], ready[i+1:]...)
				usedJobs += slots(n, jobs)
				usedMem += n.MemMiB
				running++
				if opts.Start != nil {
					opts.Start(n.Name)
				}
				go func() {
					err := n.Run(ctx)
					if err == nil && ctx.Err() != nil {
						err = ctx.Err() // returned early on cancellation
					}
					results <- result{n, err}
				}()
			}
		}
		if running == 0 {
			break
		}
		r := <-results
		running--
		finished++
		usedJobs -= slots(r.n, jobs)
		usedMem -= r.n.MemMiB
		if opts.Finish != nil {
			opts.Finish(r.n.Name, r.err)
		}
		if r.err != nil {
			if first == nil && ctx.Err() == nil {
				first = &NodeError{Node: r.n.Name, Err: r.err}
			}
			cancel()
			continue
		}
		for _, u := range users[r.n.Name] {
			if waiting[u.Name]--; waiting[u.Name] == 0 {
				ready = append(ready, u)
			}
		}
	}
	if first != nil {
		return first
	}
	if err := ctx.Err(); err != nil {
		return err // the caller's context: interrupted
	}
	if finished != len(order) {
		return fmt.Errorf("graph: %d of %d steps ran", finished, len(order))
	}
	return nil
}

func slots(n *Node, jobs int) int {
	return min(max(n.Jobs, 1), jobs)
}
