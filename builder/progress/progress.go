// Package progress reports a build's progress from its steps' own signals:
// a live block on a terminal, plain lines in logs, or JSON events, and the
// summary table at the end. Steps report through their context (Report,
// WatchBytes, LineCounter), so they need no reporter of their own.
package progress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
)

// Event is one line of `builder build --json` progress (JSON lines on
// stderr): a step started, progressed, finished or failed, or a log line.
type Event struct {
	Step  string `json:"step,omitempty"`
	State string `json:"state"` // one of States
	// Done of Total Units (packages, bytes); Total 0: not known.
	Done  int64  `json:"done,omitempty"`
	Total int64  `json:"total,omitempty"`
	Unit  string `json:"unit,omitempty"`
	// Elapsed is seconds since the step started.
	Elapsed float64 `json:"elapsed"`
	Cached  bool    `json:"cached"`
	// Key is the step's cache key, Size its output's bytes (done events).
	Key     string `json:"key,omitempty"`
	Size    int64  `json:"size,omitempty"`
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}

// The states of an Event.
const (
	StateStart    = "start"
	StateProgress = "progress"
	StateDone     = "done"
	StateFailed   = "failed"
	StateLog      = "log" // a line of the build log: Message, no Step
)

// States are every state an Event has, in the order a step goes through
// them (the README lists them).
var States = []string{StateStart, StateProgress, StateDone, StateFailed, StateLog}

// Progress output modes.
const (
	ModeAuto  = ""      // a live block on a terminal, else plain lines
	ModePlain = "plain" // start/done lines, running steps every PlainEvery
	ModeJSON  = "json"  // Event per line
)

// PlainEvery is how often plain output reports a running step.
var PlainEvery = 10 * time.Second

// Reporter prints build progress from the steps' own signals: on a
// terminal one updating line per running step, in plain mode (CI logs,
// pipes) a line per step start and end and one per running step every
// PlainEvery, in JSON mode one Event per line.
type Reporter struct {
	w       io.Writer
	mode    string
	verbose bool
	begin   time.Time

	mu    sync.Mutex
	steps map[string]*stepState
	order []string // steps in start order, for the summary
	drawn int      // lines of the live block now on the terminal
	stop  chan struct{}
	done  sync.WaitGroup
}

type stepState struct {
	name            string
	start           time.Time
	elapsed         time.Duration
	running, failed bool
	cancelled       bool
	cached          bool
	done, total     int64
	unit            string
	key             string
	size            int64
	lastPlain       time.Time
	changed         bool
}

// New writes to w (nil: silence) in mode; verbose adds --Explain lines.
func New(w io.Writer, verbose bool, mode string) *Reporter {
	if mode == ModeAuto {
		mode = ModePlain
		if f, ok := w.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				mode = "tty"
			}
		}
	}
	r := &Reporter{w: w, mode: mode, verbose: verbose, begin: time.Now(), steps: map[string]*stepState{}, stop: make(chan struct{})}
	if w != nil {
		r.done.Add(1)
		go r.tick()
	}
	return r
}

// Close stops the live output; the reporter must not be used after.
func (r *Reporter) Close() {
	if r == nil || r.w == nil {
		return
	}
	r.mu.Lock()
	select {
	case <-r.stop:
		r.mu.Unlock()
		return
	default:
	}
	close(r.stop)
	r.mu.Unlock()
	r.done.Wait()
	r.mu.Lock()
	r.clearBlock()
	r.mu.Unlock()
}

func (r *Reporter) tick() {
	defer r.done.Done()
	every := time.Second
	if r.mode == "tty" {
		every = 250 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.mu.Lock()
			r.refresh()
			r.mu.Unlock()
		}
	}
}

// refresh reports running steps: redraws the block, prints due plain
// lines, emits changed JSON progress. Called with mu held.
func (r *Reporter) refresh() {
	now := time.Now()
	switch r.mode {
	case "tty":
		r.clearBlock()
		r.drawBlock()
	case ModePlain:
		for _, name := range r.order {
			s := r.steps[name]
			if s.running && now.Sub(s.lastPlain) >= PlainEvery {
				s.lastPlain = now
				fmt.Fprintf(r.w, "%s %s: running %.0fs%s\n", r.stamp(), s.name, now.Sub(s.start).Seconds(), s.counter())
			}
		}
	case ModeJSON:
		for _, name := range r.order {
			s := r.steps[name]
			if s.running && s.changed {
				s.changed = false
				r.emit(Event{Step: s.name, State: StateProgress, Done: s.done, Total: s.total, Unit: s.unit, Elapsed: secs(now.Sub(s.start))})
			}
		}
	}
}

func (r *Reporter) clearBlock() {
	if r.drawn > 0 {
		fmt.Fprintf(r.w, "\033[%dA\r\033[J", r.drawn)
		r.drawn = 0
	}
}

func (r *Reporter) drawBlock() {
	for _, name := range r.order {
		s := r.steps[name]
		if s.running {
			fmt.Fprintf(r.w, "%s %-32s running %5.0fs%s\n", r.stamp(), s.name, time.Since(s.start).Seconds(), s.counter())
			r.drawn++
		}
	}
}

// line prints a permanent line; on a terminal above the live block.
func (r *Reporter) line(format string, args ...any) {
	if r == nil || r.w == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lineLocked(format, args...)
}

func (r *Reporter) lineLocked(format string, args ...any) {
	if r.mode == ModeJSON {
		r.emit(Event{State: StateLog, Message: fmt.Sprintf(format, args...), Elapsed: secs(time.Since(r.begin))})
		return
	}
	tty := r.mode == "tty"
	if tty {
		r.clearBlock()
	}
	fmt.Fprintf(r.w, "%s "+format+"\n", append([]any{r.stamp()}, args...)...)
	if tty {
		r.drawBlock()
	}
}

func (r *Reporter) emit(e Event) {
	b, _ := json.Marshal(e)
	r.w.Write(append(b, '\n'))
}

func (s *stepState) counter() string {
	switch {
	case s.unit == "":
		return ""
	case s.unit == "bytes" && s.total > 0:
		return fmt.Sprintf("  %s of %s", HumanSize(s.done), HumanSize(s.total))
	case s.unit == "bytes":
		return "  " + HumanSize(s.done)
	case s.total > 0:
		return fmt.Sprintf("  %d of %d %s", s.done, s.total, s.unit)
	}
	return fmt.Sprintf("  %d %s", s.done, s.unit)
}

func (r *Reporter) stamp() string {
	return fmt.Sprintf("[%6.1fs]", time.Since(r.begin).Seconds())
}

func (r *Reporter) state(step string) *stepState {
	s := r.steps[step]
	if s == nil {
		s = &stepState{name: step}
		r.steps[step] = s
		r.order = append(r.order, step)
	}
	return s
}

// begin announces a step.
func (r *Reporter) BeginStep(step string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.state(step)
	s.start, s.lastPlain, s.running = time.Now(), time.Now(), true
	if r.w == nil {
		return
	}
	switch r.mode {
	case ModeJSON:
		r.emit(Event{Step: step, State: StateStart})
	case ModePlain:
		fmt.Fprintf(r.w, "%s %s: start\n", r.stamp(), step)
	default:
		r.clearBlock()
		r.drawBlock()
	}
}

// EndStep closes a step; size is its output's bytes.
func (r *Reporter) EndStep(step string, err error, size int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.state(step)
	s.running, s.failed, s.size = false, err != nil, size
	s.cancelled = errors.Is(err, context.Canceled)
	s.elapsed = time.Since(s.start)
	if r.w == nil {
		return
	}
	if r.mode == ModeJSON {
		e := Event{Step: step, State: StateDone, Done: s.done, Total: s.total, Unit: s.unit, Elapsed: secs(s.elapsed), Cached: s.cached, Key: s.key, Size: size}
		if err != nil {
			e.State, e.Error = StateFailed, err.Error()
		}
		r.emit(e)
		return
	}
	switch {
	case errors.Is(err, context.Canceled):
		r.lineLocked("%-32s cancelled after %.1fs", step, s.elapsed.Seconds())
	case err != nil:
		r.lineLocked("%-32s FAILED after %.1fs", step, s.elapsed.Seconds())
	case s.cached:
		r.lineLocked("%-32s cached", step)
	default:
		r.lineLocked("%-32s built in %.1fs", step, s.elapsed.Seconds())
	}
}

// setProgress records a step's own progress signal.
func (r *Reporter) setProgress(step string, done, total int64, unit string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.state(step)
	if total > 0 && done > total {
		total = done // an estimate the step outgrew
	}
	if s.done != done || s.total != total || s.unit != unit {
		s.done, s.total, s.unit, s.changed = done, total, unit, true
	}
}

func (r *Reporter) Cached(step string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.state(step).cached = true
	r.mu.Unlock()
}

func (r *Reporter) SetKey(step, key string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.state(step).key = key
	r.mu.Unlock()
}

func (r *Reporter) Explain(step, why string) {
	if r != nil && r.verbose {
		r.line("%s: cache miss: %s", step, why)
	}
}

// Infof prints an informational line.
func (r *Reporter) Infof(format string, args ...any) { r.line(format, args...) }

// StepSummary is one row of the summary table.
type StepSummary struct {
	Step   string
	Time   time.Duration
	Cached bool
	Failed bool
	// Cancelled: stopped because another step failed or the build was
	// interrupted.
	Cancelled bool
	Size      int64
	Key       string
}

// Summary lists the finished steps in start order.
func (r *Reporter) Summary() []StepSummary {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []StepSummary
	for _, name := range r.order {
		s := r.steps[name]
		if s.running || s.start.IsZero() {
			continue
		}
		out = append(out, StepSummary{Step: name, Time: s.elapsed, Cached: s.cached, Failed: s.failed, Cancelled: s.cancelled, Size: s.size, Key: s.key})
	}
	return out
}

// PrintSummary ends a plain or terminal build with the per-step table.
func (r *Reporter) PrintSummary(total time.Duration) {
	if r == nil || r.w == nil || r.mode == ModeJSON {
		return
	}
	rows := r.Summary()
	if len(rows) == 0 {
		return // nothing ran (the output was up to date, or a check failed)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clearBlock()
	tw := tabwriter.NewWriter(r.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tTIME\tCACHED\tSIZE\t")
	var steps time.Duration
	for _, s := range rows {
		cached := "no"
		switch {
		case s.Cancelled:
			cached = "cancelled"
		case s.Failed:
			cached = "FAILED"
		case s.Cached:
			cached = "yes"
		}
		fmt.Fprintf(tw, "%s\t%.1fs\t%s\t%s\t\n", s.Step, s.Time.Seconds(), cached, HumanSize(s.Size))
		steps += s.Time
	}
	fmt.Fprintf(tw, "total (wall)\t%.1fs\t\t\t\n", total.Seconds())
	fmt.Fprintf(tw, "steps (sum)\t%.1fs\t\t\t\n", steps.Seconds())
	tw.Flush()
}

func secs(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }

// HumanSize is a byte count in binary units, as the build summary and the
// cache commands print it.
func HumanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// A step reports its own progress through its context: the graph gives
// each node a meter naming the step.

type meterKey struct{}

type meter struct {
	r    *Reporter
	step string
}

func WithMeter(ctx context.Context, r *Reporter, step string) context.Context {
	return context.WithValue(ctx, meterKey{}, &meter{r: r, step: step})
}

// StepName is the graph's name for the step running under ctx (unique
// even when two layers build the same module), else name.
func StepName(ctx context.Context, name string) string {
	if m, ok := ctx.Value(meterKey{}).(*meter); ok {
		return m.step
	}
	return name
}

// Report records done of total units for the step running under
// ctx; without a meter it does nothing.
func Report(ctx context.Context, done, total int64, unit string) {
	if m, ok := ctx.Value(meterKey{}).(*meter); ok {
		m.r.setProgress(m.step, done, total, unit)
	}
}

// WatchBytes reports the bytes in the files at paths (a file or a tree)
// every half second until the returned stop is called.
func WatchBytes(ctx context.Context, total int64, paths ...string) (stop func()) {
	if _, ok := ctx.Value(meterKey{}).(*meter); !ok {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				var n int64
				for _, p := range paths {
					n += WrittenBytes(p)
				}
				Report(ctx, n, max(total, 0), "bytes")
			}
		}
	}()
	return func() { close(quit); wg.Wait() }
}

// LineCounter is an io.Writer that counts the lines a tool prints that
// match, reporting them as progress, and keeps the output for errors.
type LineCounter struct {
	ctx   context.Context
	unit  string
	count func(line string, done, total *int64)
	buf   strings.Builder
	part  []byte
	done  int64
	total int64
}

// NewLineCounter counts, through count, the lines a tool prints as
// progress in unit of the step running under ctx.
func NewLineCounter(ctx context.Context, unit string, count func(line string, done, total *int64)) *LineCounter {
	return &LineCounter{ctx: ctx, unit: unit, count: count}
}

// String is everything the tool printed, for errors.
func (c *LineCounter) String() string { return c.buf.String() }

func (c *LineCounter) Write(p []byte) (int, error) {
	c.buf.Write(p)
	c.part = append(c.part, p...)
	for {
		i := slices.Index(c.part, '\n')
		if i < 0 {
			break
		}
		c.count(string(c.part[:i]), &c.done, &c.total)
		c.part = c.part[i+1:]
	}
	Report(c.ctx, c.done, max(c.total, c.done), c.unit)
	return len(p), nil
}

// DirSize is the bytes in the regular files under p (or p itself).
func DirSize(p string) int64 { return treeBytes(p, false) }

// WrittenBytes is what the files under p (a file or a tree) hold on disk,
// at most their sizes: a writer that sizes its file first (disk, ISO)
// shows the bytes it has written so far, not the size it set.
func WrittenBytes(p string) int64 { return treeBytes(p, true) }

func treeBytes(p string, onDisk bool) int64 {
	var n int64
	_ = filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		size := fi.Size()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && onDisk {
			size = min(size, st.Blocks*512)
		}
		n += size
		return nil
	})
	return n
}
