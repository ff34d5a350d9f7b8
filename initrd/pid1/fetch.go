package pid1

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// CACertsPath is the CA bundle the init trusts for https URLs. The initrd
// carries no roots of its own: the builder copies the image's bundle there
// when asked (initrd.AssembleOptions.Files), else https is refused.
const CACertsPath = "/etc/ssl/certs/ca-certificates.crt"

// Fetch tuning.
var (
	fetchAttempts     = 4
	fetchStallTimeout = 60 * time.Second // no byte for this long: give up on the attempt
	fetchProgress     = 5 * time.Second
)

// ErrDigestMismatch is wrapped when fetched bytes do not have the digest
// the command line promised. It is not retried: the server has the wrong
// file, and fetching it again would not change that.
var ErrDigestMismatch = errors.New("sha256 mismatch")

// fetchSink receives one download attempt. Begin is called at the start of
// every attempt with the announced length (-1 if unknown), so a retried
// download starts over. The installer (disk.Installer) is one.
type fetchSink interface {
	Begin(size int64) (io.Writer, error)
}

func httpClient() (*http.Client, error) {
	tr := &http.Transport{
		Proxy:                 nil, // the initrd has no proxy settings
		DialContext:           (&net.Dialer{Timeout: 15 * time.Second}).DialContext,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		DisableCompression:    true, // digests are over the bytes as served
	}
	if pem, err := os.ReadFile(CACertsPath); err == nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no certificates", CACertsPath)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr}, nil
}

// fetchVerified downloads url into sink, checking its sha256 against want
// (lower-case hex) while streaming. Transient failures (connection errors,
// 5xx, a stalled or cut transfer) are retried from the start; a digest
// mismatch or a 4xx is not. It returns the number of bytes fetched.
func (i *initProcess) fetchVerified(url, want string, sink fetchSink) (int64, error) {
	if strings.HasPrefix(url, "https://") {
		if _, err := os.Stat(CACertsPath); err != nil {
			return 0, fmt.Errorf("fetch %s: https needs CA certificates at %s in the initrd, and there are none (use http with the sha256 check, or build the initrd with the CA bundle)", url, CACertsPath)
		}
	}
	client, err := httpClient()
	if err != nil {
		return 0, fmt.Errorf("fetch %s: %w", url, err)
	}
	var lastErr error
	for attempt := 1; attempt <= fetchAttempts; attempt++ {
		if attempt > 1 {
			wait := time.Duration(attempt-1) * 3 * time.Second
			i.logf("fetch: retrying in %v (attempt %d of %d): %v", wait, attempt, fetchAttempts, lastErr)
			time.Sleep(wait)
		}
		n, err := i.fetchOnce(client, url, want, sink)
		if err == nil {
			return n, nil
		}
		lastErr = err
		var perm permanentError
		if errors.Is(err, ErrDigestMismatch) || errors.As(err, &perm) {
			return 0, err
		}
	}
	return 0, fmt.Errorf("fetch %s: giving up after %d attempts: %w", url, fetchAttempts, lastErr)
}

// permanentError marks failures a retry cannot fix.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

func (i *initProcess) fetchOnce(client *http.Client, url, want string, sink fetchSink) (int64, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, permanentError{fmt.Errorf("fetch %s: %w", url, err)}
	}
	req.Header.Set("User-Agent", "osb-init")
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("fetch %s: server said %s", url, resp.Status)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return 0, permanentError{err}
		}
		return 0, err
	}
	w, err := sink.Begin(resp.ContentLength)
	if err != nil {
		return 0, permanentError{err}
	}
	i.logf("fetch: %s (%s)", url, sizeString(resp.ContentLength))

	// A watchdog cancels the request when no data arrives for a while:
	// a dead server must not hang the boot forever.
	progress := make(chan int64, 1)
	go func() {
		stall := time.NewTimer(fetchStallTimeout)
		defer stall.Stop()
		for {
			select {
			case _, ok := <-progress:
				if !ok {
					return
				}
				stall.Reset(fetchStallTimeout)
			case <-stall.C:
				cancel()
				return
			}
		}
	}()
	defer close(progress)

	h := sha256.New()
	buf := make([]byte, 4<<20)
	var n int64
	start, lastLog := time.Now(), time.Now()
	for {
		m, rerr := io.ReadFull(resp.Body, buf)
		if m > 0 {
			h.Write(buf[:m])
			if _, err := w.Write(buf[:m]); err != nil {
				return n, permanentError{err}
			}
			n += int64(m)
			select {
			case progress <- n:
			default:
			}
			if time.Since(lastLog) >= fetchProgress {
				i.logf("fetch: %s of %s (%.1f MB/s)", sizeString(n), sizeString(resp.ContentLength), rate(n, time.Since(start)))
				lastLog = time.Now()
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return n, fmt.Errorf("fetch %s: no data for %v after %s", url, fetchStallTimeout, sizeString(n))
			}
			return n, fmt.Errorf("fetch %s: after %s: %w", url, sizeString(n), rerr)
		}
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return n, fmt.Errorf("fetch %s: got %d of %d bytes", url, n, resp.ContentLength)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if got != want {
		return n, fmt.Errorf("fetch %s: %w: got %s, the command line wants %s; refusing to use it", url, ErrDigestMismatch, got, want)
	}
	i.logf("fetch: %s verified (sha256 %s…) in %v, %.1f MB/s", sizeString(n), got[:16], time.Since(start).Round(time.Millisecond), rate(n, time.Since(start)))
	return n, nil
}

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / 1e6 / d.Seconds()
}

func sizeString(n int64) string {
	if n < 0 {
		return "unknown size"
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// fileSink writes a download to a file in RAM (a tmpfs), starting over on
// every attempt.
type fileSink struct {
	f *os.File
}

func (s *fileSink) Begin(size int64) (io.Writer, error) {
	if err := s.f.Truncate(0); err != nil {
		return nil, fmt.Errorf("truncate %s: %w", s.f.Name(), err)
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("seek %s: %w", s.f.Name(), err)
	}
	if size > 0 {
		// Allocate up front, so a too-small tmpfs fails now with a clear
		// message rather than halfway through.
		if err := fallocate(s.f, size); err != nil {
			return nil, fmt.Errorf("reserve %s in RAM for %s: %w (not enough memory?)", sizeString(size), s.f.Name(), err)
		}
	}
	return s.f, nil
}
