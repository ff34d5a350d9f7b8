package redfish

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ironcore-dev/os-builder/boot"
)

// BootOverride reads the override, in the plan's target spelling.
func (c *Client) BootOverride(ctx context.Context) (boot.Override, error) {
	var sys systemDoc
	if _, err := c.get(ctx, c.systemPath, &sys); err != nil {
		return boot.Override{}, fmt.Errorf("reading boot override: %w", err)
	}
	o := boot.Override{Target: c.quirks.fromVendor(sys.Boot.Target), Enabled: sys.Boot.Enabled, HTTPBootURI: sys.Boot.HTTPBootURI}
	if sys.Boot.Mode != nil {
		o.Mode = *sys.Boot.Mode
	}
	return o, nil
}

// bootPatch is the whole PATCH body: only the properties we set, never the
// object we read (BMCs reject read-only properties sent back).
type bootPatch struct {
	Boot struct {
		Enabled     string `json:"BootSourceOverrideEnabled,omitempty"`
		Target      string `json:"BootSourceOverrideTarget,omitempty"`
		Mode        string `json:"BootSourceOverrideMode,omitempty"`
		HTTPBootURI string `json:"HttpBootUri,omitempty"`
	}
}

// SetBootOverride PATCHes a fresh minimal Boot object with If-Match; on 412
// (someone changed the system) it re-reads the ETag and tries again.
func (c *Client) SetBootOverride(ctx context.Context, o boot.Override) error {
	var p bootPatch
	p.Boot.Target = c.quirks.toVendor(o.Target)
	p.Boot.Enabled = o.Enabled
	if o.Enabled == boot.EnabledContinuous && c.quirks.NoContinuous {
		p.Boot.Enabled = boot.EnabledOnce
	}
	if o.Mode != "" && o.Enabled != boot.EnabledDisabled &&
		(c.quirks.SendOverrideMode == "always" || c.quirks.SendOverrideMode == "" && c.modeReported) {
		p.Boot.Mode = o.Mode
	}
	c.mu.Lock()
	if c.modeRequired && p.Boot.Mode == "" {
		p.Boot.Mode = cmp.Or(o.Mode, "UEFI")
	}
	c.mu.Unlock()
	if o.Target == boot.TargetUefiHttp {
		p.Boot.HTTPBootURI = o.HTTPBootURI
	}
	err := c.do(ctx, "set boot override", func() error {
		etag, err := c.get(ctx, c.systemPath, &struct{}{})
		if err != nil {
			return err
		}
		h := map[string]string{}
		if etag != "" {
			h["If-Match"] = etag
		}
		resp, err := c.request(ctx, http.MethodPatch, c.systemPath, p, h)
		if statusOf(err) == http.StatusPreconditionRequired && etag == "" {
			resp, err = c.request(ctx, http.MethodPatch, c.systemPath, p, map[string]string{"If-Match": "*"})
		}
		if statusOf(err) == http.StatusBadRequest && p.Boot.Mode == "" && strings.Contains(err.Error(), "BootSourceOverrideMode") {
			// A BMC that does not report the mode yet requires it (some
			// refuse any override without it): send it from now on. The
			// PATCH was refused, so sending it again is safe.
			p.Boot.Mode = cmp.Or(o.Mode, "UEFI")
			c.mu.Lock()
			c.modeRequired = true
			c.mu.Unlock()
			resp, err = c.request(ctx, http.MethodPatch, c.systemPath, p, h)
		}
		if err != nil {
			return err
		}
		return c.finish(ctx, resp)
	})
	if err != nil {
		return fmt.Errorf("setting boot override %s/%s: %w", p.Boot.Target, p.Boot.Enabled, err)
	}
	return nil
}

// actionInfo is an action's @Redfish.ActionInfo resource.
type actionInfo struct{ Parameters []struct{ Name string } }

// Media reads the CD slot.
func (c *Client) Media(ctx context.Context) (boot.Media, error) {
	if c.mediaPath == "" {
		return boot.Media{}, fmt.Errorf("%w: no virtual media CD slot", boot.ErrCapability)
	}
	var md mediaDoc
	if _, err := c.get(ctx, c.mediaPath, &md); err != nil {
		return boot.Media{}, fmt.Errorf("reading virtual media: %w", err)
	}
	m := boot.Media{Inserted: md.Inserted}
	if md.Image != nil {
		m.Image = *md.Image
	}
	return m, nil
}

// insertParams says which optional InsertMedia parameters the BMC lists
// (AllowableValues on the action, or its ActionInfo): some BMCs require
// TransferProtocolType / TransferMethod, others reject what they do not know.
type insertParams struct{ protocol, method bool }

func (p *insertParams) fromActionInfo(ctx context.Context, c *Client, path string) {
	var ai actionInfo
	if _, err := c.get(ctx, path, &ai); err != nil {
		return // optional: the 400 retry still covers a BMC that needs them
	}
	for _, prm := range ai.Parameters {
		p.protocol = p.protocol || prm.Name == "TransferProtocolType"
		p.method = p.method || prm.Name == "TransferMethod"
	}
}

// InsertMedia inserts image write-protected: by the InsertMedia action, or,
// where the slot has none (Lenovo XCC and others), by PATCHing Image,
// Inserted and WriteProtected.
func (c *Client) InsertMedia(ctx context.Context, image string) error {
	if c.mediaPath == "" {
		return fmt.Errorf("%w: no virtual media CD slot", boot.ErrCapability)
	}
	inserted := func(ctx context.Context) (bool, error) {
		m, err := c.Media(ctx)
		return m.Inserted && m.Image == image, err
	}
	var err error
	if c.insertTarget == "" {
		err = c.patchMedia(ctx, map[string]any{"Image": image, "Inserted": true, "WriteProtected": true})
	} else {
		err = c.postAction(ctx, "insert media", c.insertTarget, c.insertBody(image, c.insertParams), inserted)
		if statusOf(err) == http.StatusBadRequest && (!c.insertParams.protocol || !c.insertParams.method) &&
			(strings.Contains(err.Error(), "TransferProtocolType") || strings.Contains(err.Error(), "TransferMethod")) {
			// The BMC names a parameter it wants: send both, once.
			err = c.postAction(ctx, "insert media", c.insertTarget, c.insertBody(image, insertParams{true, true}), inserted)
		}
	}
	if err != nil {
		return fmt.Errorf("inserting virtual media %s: %w", image, err)
	}
	return nil
}

// insertBody is InsertMedia's body. Inserted and WriteProtected are left
// out: true is their schema default, and Supermicro X11/X12 answer 400
// ActionParameterUnknown when they are sent (sushy's virtual_media.py
// leaves them out for the same reason).
func (c *Client) insertBody(image string, p insertParams) map[string]any {
	body := map[string]any{"Image": image}
	if p.protocol {
		if u, err := url.Parse(image); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
			body["TransferProtocolType"] = strings.ToUpper(u.Scheme)
		}
	}
	if p.method {
		body["TransferMethod"] = "Stream"
	}
	return body
}

// patchMedia PATCHes the CD slot with If-Match (a fresh ETag per try, so a
// 412 is retried with the current one). PATCH sets values: repeating it is
// safe.
func (c *Client) patchMedia(ctx context.Context, body map[string]any) error {
	return c.do(ctx, "patch virtual media", func() error {
		etag, err := c.get(ctx, c.mediaPath, &struct{}{})
		if err != nil {
			return err
		}
		h := map[string]string{}
		if etag != "" {
			h["If-Match"] = etag
		}
		resp, err := c.request(ctx, http.MethodPatch, c.mediaPath, body, h)
		if err != nil {
			return err
		}
		return c.finish(ctx, resp)
	})
}

// EjectMedia ejects the CD slot unless it is empty already.
func (c *Client) EjectMedia(ctx context.Context) error {
	m, err := c.Media(ctx)
	if err != nil {
		return err
	}
	if !m.Inserted {
		return nil
	}
	if c.insertTarget == "" && c.ejectTarget == "" {
		err = c.patchMedia(ctx, map[string]any{"Image": nil, "Inserted": false})
	} else {
		err = c.postAction(ctx, "eject media", c.ejectTarget, struct{}{}, func(ctx context.Context) (bool, error) {
			m, err := c.Media(ctx)
			return !m.Inserted, err
		})
	}
	if err != nil {
		return fmt.Errorf("ejecting virtual media: %w", err)
	}
	return nil
}

// PowerState reads the system's power state.
func (c *Client) PowerState(ctx context.Context) (string, error) {
	var sys systemDoc
	if _, err := c.get(ctx, c.systemPath, &sys); err != nil {
		return "", fmt.Errorf("reading power state: %w", err)
	}
	return sys.PowerState, nil
}

// Reset performs ComputerSystem.Reset and follows its task monitor. When
// the answer is lost after the request reached the BMC, it re-reads the
// system: a changed LastResetTime, or On reached for "On", means the BMC
// acted; otherwise the reset is reported failed, never sent again.
func (c *Client) Reset(ctx context.Context, resetType string) error {
	var before systemDoc
	if _, err := c.get(ctx, c.systemPath, &before); err != nil {
		return fmt.Errorf("reset %s: reading system: %w", resetType, err)
	}
	acted := func(ctx context.Context) (bool, error) {
		var now systemDoc
		if _, err := c.get(ctx, c.systemPath, &now); err != nil {
			return false, err
		}
		if now.LastResetTime != "" && now.LastResetTime != before.LastResetTime {
			return true, nil
		}
		return resetType == "On" && before.PowerState == "Off" && now.PowerState == "On", nil
	}
	if err := c.postAction(ctx, "reset "+resetType, c.resetTarget, map[string]string{"ResetType": resetType}, acted); err != nil {
		return fmt.Errorf("reset %s: %w", resetType, err)
	}
	return nil
}

// ErrMaybeActed marks a non-idempotent action whose request reached the BMC
// but whose outcome is unknown, and the re-read state does not show it done:
// sending it again could act twice (a second ForceRestart).
var ErrMaybeActed = errors.New("the request reached the BMC but no answer came back; not repeating it")

// postAction POSTs a non-idempotent action. It retries only a request that
// provably never reached the BMC (nothing written: dial or connect failure)
// or that the BMC refused before acting (429, 503); any other failure
// re-reads the state with acted, which decides.
func (c *Client) postAction(ctx context.Context, op, target string, body any, acted func(context.Context) (bool, error)) error {
	if target == "" {
		return fmt.Errorf("%w: BMC offers no %s action", boot.ErrCapability, op)
	}
	var maybe error
	err := c.do(ctx, op, func() error {
		var wrote atomic.Bool
		resp, err := c.requestTraced(ctx, http.MethodPost, target, body, nil, &wrote)
		if err == nil {
			return c.finish(ctx, resp)
		}
		switch s := statusOf(err); {
		case s == http.StatusTooManyRequests, s == http.StatusServiceUnavailable, s == 0 && !wrote.Load():
			return err // not acted on: retry
		case s == 0, s >= 500:
			maybe = err
			return nil
		}
		return err
	})
	if err != nil || maybe == nil {
		return err
	}
	ok, rerr := acted(ctx)
	if rerr == nil && ok {
		return nil
	}
	if rerr != nil {
		return fmt.Errorf("%s: %w: %w (re-reading state: %v)", op, ErrMaybeActed, maybe, rerr)
	}
	return fmt.Errorf("%s: %w: %w", op, ErrMaybeActed, maybe)
}

// finish follows a 202 task monitor to completion, else closes the body.
// Following is bounded by ctx and by the client's task timeout: a monitor
// that answers 202 forever ends with boot.ErrTimeout naming it.
func (c *Client) finish(ctx context.Context, resp *http.Response) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.taskTimeout)
	defer cancel()
	var loc, state string
	for resp.StatusCode == http.StatusAccepted {
		if l := resp.Header.Get("Location"); l != "" {
			loc = l
		}
		state = taskState(resp.Body)
		resp.Body.Close()
		if err := taskFailed(state); err != nil {
			return err
		}
		if loc == "" {
			return nil // accepted without a monitor: nothing to follow
		}
		if u, err := url.Parse(loc); err == nil && u.IsAbs() {
			loc = u.RequestURI()
		}
		select {
		case <-ctx.Done():
			return c.taskTimedOut(ctx, loc, state, start)
		case <-time.After(c.taskPoll):
		}
		var err error
		if resp, err = c.request(ctx, http.MethodGet, loc, nil, nil); err != nil {
			if ctx.Err() != nil {
				return c.taskTimedOut(ctx, loc, state, start)
			}
			return fmt.Errorf("task monitor %s: %w", loc, err)
		}
	}
	state = taskState(resp.Body)
	resp.Body.Close()
	return taskFailed(state)
}

// taskTimedOut says which monitor was still running when ctx ended.
func (c *Client) taskTimedOut(ctx context.Context, loc, state string, start time.Time) error {
	if state == "" {
		state = "unknown"
	}
	err := fmt.Errorf("task monitor %s still running (TaskState %s) after %s", loc, state, time.Since(start).Round(time.Millisecond))
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("%w: %w", err, ctx.Err())
	}
	return fmt.Errorf("%w: %w: %w", boot.ErrTimeout, err, ctx.Err())
}

// taskState is the TaskState of a task (monitor) body; "" if the body is
// empty or not a task.
func taskState(r io.Reader) string {
	var task struct{ TaskState string }
	if err := decodeBody(r, &task); err != nil {
		return ""
	}
	return task.TaskState
}

func taskFailed(state string) error {
	switch state {
	case "Exception", "Killed", "Cancelled":
		return fmt.Errorf("task ended %s", state)
	}
	return nil
}
