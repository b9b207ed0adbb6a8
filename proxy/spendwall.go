package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// The spend wall's shell side (docs/spendwall.md, docs/spendwall.md#wire-names). The model decides
// everything (model/spendwall*.go): whether a 429 is absorbed, when the lane
// is on, when to wait, when to ask for a limit reset. The proxy only
//   - adds the lane request header to attempts the model marks SlowLane,
//   - carries out StepLimitReset: the usage and reset HTTP calls, whose
//     answer it reports back as a typed model.LimitResetResult.
// It never looks at the request or response body format, so it works with
// any wire adapter.

// SpendWallConfig is a connection's spend-wall opt-in (config key
// `spendWall`, docs/config.md).
type SpendWallConfig struct {
	// SlowLane accepts the provider's low-priority lane offer.
	SlowLane bool `yaml:"slowLane" json:"slowLane,omitempty"`
	// LimitReset asks the usage endpoint for a session limit reset first.
	LimitReset bool `yaml:"limitReset" json:"limitReset,omitempty"`
	// OrgID is the organisation UUID of the reset URL; required with
	// LimitReset.
	OrgID string `yaml:"orgId" json:"orgId,omitempty"`
	// BaseURL overrides where the usage / reset endpoints live; default the
	// provider's baseURL without a trailing /v1.
	BaseURL string `yaml:"baseURL" json:"baseURL,omitempty"`
}

func (c SpendWallConfig) model() model.SpendWallConfig {
	return model.SpendWallConfig{SlowLane: c.SlowLane, LimitReset: c.LimitReset}
}

// validate names what is wrong with the block (field relative to it).
func (c SpendWallConfig) validate() (field, problem string) {
	if c.LimitReset && strings.TrimSpace(c.OrgID) == "" {
		return "orgId", "is required with limitReset: true (the reset URL names the organisation)"
	}
	if c.OrgID != "" && (strings.ContainsAny(c.OrgID, "/?#% ") || len(c.OrgID) > 128) {
		return "orgId", "must be an organisation id (no '/', '?', '#', '%' or spaces, at most 128 characters)"
	}
	if c.BaseURL != "" {
		if u, err := url.Parse(c.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "baseURL", "must be an http(s) URL"
		}
	}
	return "", ""
}

// setSpendWallHeader adds the lane request header when the model put the
// attempt on the lane.
func setSpendWallHeader(h http.Header, a *model.Attempt) {
	if a.SlowLane {
		h.Set(model.HeaderUsageLimit, model.UsageLimitSlow)
	}
}

// spendWallBase is where the usage / reset endpoints live for a provider.
func spendWallBase(prov *provRuntime, c *SpendWallConfig) string {
	if c.BaseURL != "" {
		return strings.TrimRight(c.BaseURL, "/")
	}
	return strings.TrimSuffix(strings.TrimRight(prov.cfg.BaseURL, "/"), "/v1")
}

// limitResetTimeout bounds the usage and reset calls together.
const limitResetTimeout = 15 * time.Second

const maxLimitResetBody = 64 << 10

// limitReset carries out a StepLimitReset and reports the result to the
// flow. It returns (done, status) like attempt.
func (rs *reqState) limitReset(st *model.Step) (bool, int) {
	g := rs.g
	ref := st.LastConnection
	res := model.LimitResetResult{Outcome: model.LimitResetFailed}
	var prov *provRuntime
	var conn *connRuntime
	if prov = g.provider(ref.Provider); prov != nil {
		conn = prov.conns[ref.Connection]
	}
	if conn != nil {
		ctx, cancel := context.WithTimeout(rs.ctx, min(limitResetTimeout, max(time.Millisecond, rs.dl.Sub(g.now()))))
		res = callLimitReset(ctx, g.client, spendWallBase(prov, &conn.cfg.SpendWall), conn.cfg.SpendWall.OrgID, conn.cfg.APIKey)
		cancel()
	}
	if g.log.Enabled(rs.ctx, slog.LevelInfo) {
		// Never the credential or the organisation id: the connection names it.
		g.log.LogAttrs(context.Background(), slog.LevelInfo, "spend wall limit reset", slog.String("request_id", rs.logID),
			slog.String("provider", ref.Provider), slog.String("connection", ref.Connection), slog.String("result", res.Outcome.String()))
	}
	if rs.ctx.Err() != nil {
		// The client left during the calls; the flow still learns the
		// answer so the memo / pause is kept.
		g.lock()
		rs.flow.LimitResetDone(g.modelNow(), g.eng, res)
		g.unlock()
		return true, rs.clientGone()
	}
	g.lock()
	_, ans := rs.flow.LimitResetDone(g.modelNow(), g.eng, res)
	g.unlock()
	if ans == nil {
		return false, 0
	}
	return true, rs.answer(ans)
}

// usageBody is the usage endpoint's answer; only the reset program block
// matters.
type usageBody struct {
	Block *struct {
		Arm             string          `json:"arm"`
		Available       bool            `json:"available"`
		NextAvailableAt json.RawMessage `json:"next_available_at"`
	} `json:"juniper_tide"`
}

type resetBody struct {
	Result          string          `json:"result"`
	NextAvailableAt json.RawMessage `json:"next_available_at"`
}

// callLimitReset asks the usage endpoint and, when a reset is offered and
// available, requests it (docs/spendwall.md#wire-names). Every failure is LimitResetFailed.
func callLimitReset(ctx context.Context, client *http.Client, base, orgID, key string) model.LimitResetResult {
	failed := model.LimitResetResult{Outcome: model.LimitResetFailed}
	var u usageBody
	if err := doJSON(ctx, client, http.MethodGet, base+"/api/oauth/usage?at_wall=1&skip_spend=1", key, nil, &u); err != nil || u.Block == nil {
		return failed
	}
	next := parseNextAvailable(u.Block.NextAvailableAt)
	switch {
	case u.Block.Arm != "reset":
		return model.LimitResetResult{Outcome: model.LimitResetNotOffered, NextAvailableAt: next}
	case !u.Block.Available:
		return model.LimitResetResult{Outcome: model.LimitResetAlreadyUsed, NextAvailableAt: next}
	case orgID == "":
		return failed
	}
	var r resetBody
	body := []byte(`{"program":"` + model.LimitResetProgram + `"}`)
	if err := doJSON(ctx, client, http.MethodPost, base+"/api/organizations/"+url.PathEscape(orgID)+"/reset_rate_limits", key, body, &r); err != nil {
		return failed
	}
	return model.LimitResetResult{Outcome: model.ParseLimitResetResult(r.Result), NextAvailableAt: parseNextAvailable(r.NextAvailableAt)}
}

// doJSON makes one call and decodes a 2xx JSON answer into out.
func doJSON(ctx context.Context, client *http.Client, method, u, key string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("User-Agent", "breakwater")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxLimitResetBody))
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return json.Unmarshal(b, out)
}

// parseNextAvailable reads next_available_at: Unix seconds (number or
// string) or RFC 3339; 0 when absent or malformed.
func parseNextAvailable(raw json.RawMessage) model.Time {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return 0
	}
	if uq, err := strconv.Unquote(s); err == nil {
		s = uq
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if n <= 0 || n > 1e11 {
			return 0
		}
		return model.Time(int64(n * 1000))
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return model.TimeOf(t)
	}
	return 0
}
