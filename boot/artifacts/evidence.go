package artifacts

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ironcore-dev/os-builder/boot"
)

// Boot tokens bind boot evidence to one boot: a plan resolved with
// ArtifactBaseURL = BootURL(id) has every URL under /b/<token>/, and
// FetchEvidence counts only a GET of that exact URL, which only a client
// that got it from this boot's plan (override, iPXE script, media) knows.
// The token is an HMAC of the boot's id under a key kept in the private
// cache directory: nobody else can make one, and a restarted server makes
// the same one (a resumed plan keeps its digest and its URLs).
//
// Short: UEFI HTTP boot URLs reach firmware through DHCP's 128-byte boot
// file field (QEMU's slirp asserts on longer ones), and a blob URL is 88
// bytes before its host. 64 bits are more than an online guess reaches.
const (
	bootPrefix   = "b"
	bootTokenLen = 16 // hex digits: 64 bits
)

// BootURL is the base URL for the plan of one boot: the advertised URL
// plus /b/<token>, the token made from bootID (e.g. the BMC's URL and
// the image reference).
func (s *Server) BootURL(bootID string) string {
	return s.advertise + "/" + bootPrefix + "/" + bootToken(s.bootKey, bootID)
}

// BootURL is Server.BootURL before the server exists (a plan is resolved
// before the artifact server is started): the token is made with the key
// in cacheDir (default DefaultCacheDir), the one the server will use.
func BootURL(advertiseURL, cacheDir, bootID string) (string, error) {
	if cacheDir == "" {
		var err error
		if cacheDir, err = DefaultCacheDir(); err != nil {
			return "", fmt.Errorf("%w: %w", errCache, err)
		}
	}
	c, err := openCache(cacheDir)
	if err != nil {
		return "", err
	}
	defer c.close()
	key, err := c.bootKey()
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(advertiseURL, "/") + "/" + bootPrefix + "/" + bootToken(key, bootID), nil
}

func bootToken(key []byte, bootID string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("os-builder boot token\x00" + bootID))
	return hex.EncodeToString(m.Sum(nil))[:bootTokenLen]
}

func validBootToken(t string) bool {
	if len(t) != bootTokenLen {
		return false
	}
	for _, c := range t {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// servedGET is a whole-file GET of one URL path by one client address,
// the latest one's arrival.
type servedGET struct {
	from netip.Addr
	at   time.Time
}

// markServed records a whole-file GET, who made it and when it arrived:
// the evidence that a machine is fetching its boot artifact.
func (s *Server) markServed(r *http.Request, at time.Time) {
	if r.Method != http.MethodGet || r.Header.Get("Range") != "" || r.Context().Err() != nil {
		return
	}
	var from netip.Addr
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		from = ap.Addr().Unmap()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	gets := s.served[r.URL.Path]
	i := slices.IndexFunc(gets, func(g servedGET) bool { return g.from == from })
	switch {
	case i < 0:
		s.served[r.URL.Path] = append(gets, servedGET{from, at})
	case at.After(gets[i].at):
		gets[i].at = at
	default:
		return
	}
	close(s.servedCh)
	s.servedCh = make(chan struct{})
}

// ErrNoBootToken means a plan's URLs carry no boot token: any client's GET
// of them would pass for the machine's (see BootURL).
var ErrNoBootToken = errors.New("the plan's artifact URLs carry no boot token (resolve it with ArtifactBaseURL from artifacts.Server.BootURL)")

// FetchEvidence is a boot.EvidenceFunc: the boot counts as seen once the
// machine has fetched the plan's first boot file (UKI, iPXE script, ISO)
// by its URL, boot token included, in a GET that arrived at or after the
// attempt's power action (since): the token is the same for every attempt,
// so an earlier attempt's fetch, or one by anyone who saw the URL before,
// does not count. With from, only a GET from one of these addresses counts
// (where the machine's address is known: that also shuts out whoever
// learns the URL and fetches it during the attempt). A plan
// without a boot token is refused (ErrNoBootToken). Disk boots and policy
// None fetch nothing, so they pass at once.
func (s *Server) FetchEvidence(from ...netip.Addr) boot.EvidenceFunc {
	return func(ctx context.Context, p *boot.Plan, since time.Time) error {
		want := firstBootFile(p)
		if want == "" {
			return nil
		}
		u, err := url.Parse(want)
		if err != nil {
			return err
		}
		if base, err := url.Parse(s.advertise); err == nil {
			// The advertised URL may carry a prefix a proxy strips.
			u.Path = "/" + strings.TrimPrefix(strings.TrimPrefix(u.Path, base.Path), "/")
		}
		if parts := strings.SplitN(strings.TrimPrefix(u.Path, "/"), "/", 3); len(parts) < 3 || parts[0] != bootPrefix || !validBootToken(parts[1]) {
			return fmt.Errorf("boot evidence for %s: %w", want, ErrNoBootToken)
		}
		counts := func(gets []servedGET) bool {
			return slices.ContainsFunc(gets, func(g servedGET) bool {
				return !g.at.Before(since) &&
					(len(from) == 0 || slices.ContainsFunc(from, func(f netip.Addr) bool { return f.Unmap() == g.from }))
			})
		}
		for {
			s.mu.Lock()
			ok, ch := counts(s.served[u.Path]), s.servedCh
			s.mu.Unlock()
			if ok {
				return nil
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return fmt.Errorf("machine did not fetch %s: %w", want, ctx.Err())
			}
		}
	}
}

func firstBootFile(p *boot.Plan) string {
	for _, st := range p.Steps {
		if st.Kind != boot.StepPublishArtifacts {
			continue
		}
		if len(st.Scripts) > 0 {
			return st.Scripts[0].URL
		}
		if len(st.Artifacts) > 0 {
			return st.Artifacts[0].URL
		}
	}
	return ""
}
