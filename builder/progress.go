package builder

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Reporter prints build progress: a live elapsed-time line per step on a
// terminal, plain lines otherwise (CI logs, pipes).
type Reporter struct {
	w        io.Writer
	terminal bool
	verbose  bool
	mu       sync.Mutex
	begin    time.Time
	cachedBy map[string]bool
}

// NewReporter writes to w; verbose adds --explain lines on cache misses.
func NewReporter(w io.Writer, verbose bool) *Reporter {
	term := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			term = true
		}
	}
	return &Reporter{w: w, terminal: term, verbose: verbose, begin: time.Now(), cachedBy: map[string]bool{}}
}

func (r *Reporter) printf(format string, args ...any) {
	if r == nil || r.w == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.w, format, args...)
}

func (r *Reporter) stamp() string {
	return fmt.Sprintf("[%6.1fs]", time.Since(r.begin).Seconds())
}

// start announces a step and returns the function that closes it.
func (r *Reporter) start(step string) func(time.Duration, error) {
	if r == nil {
		return func(time.Duration, error) {}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if r.terminal {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			startedAt := time.Now()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					r.printf("\r%s %-28s running %5.0fs", r.stamp(), step, time.Since(startedAt).Seconds())
				}
			}
		}()
	}
	if !r.terminal {
		r.printf("%s %s: start\n", r.stamp(), step)
	}
	return func(d time.Duration, err error) {
		close(stop)
		wg.Wait()
		prefix := ""
		if r.terminal {
			prefix = "\r\033[K"
		}
		r.mu.Lock()
		cached := r.cachedBy[step]
		r.mu.Unlock()
		switch {
		case err != nil:
			r.printf("%s%s %-28s FAILED after %.1fs\n", prefix, r.stamp(), step, d.Seconds())
		case cached:
			r.printf("%s%s %-28s cached\n", prefix, r.stamp(), step)
		default:
			r.printf("%s%s %-28s built in %.1fs\n", prefix, r.stamp(), step, d.Seconds())
		}
	}
}

func (r *Reporter) cached(step string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.cachedBy[step] = true
	r.mu.Unlock()
}

func (r *Reporter) explain(step, why string) {
	if r != nil && r.verbose {
		r.printf("%s %s: cache miss: %s\n", r.stamp(), step, why)
	}
}

// Infof prints an informational line.
func (r *Reporter) Infof(format string, args ...any) {
	r.printf("%s "+format+"\n", append([]any{r.stamp()}, args...)...)
}
