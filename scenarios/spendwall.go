package scenarios

import (
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/scenarios/yamlnode"
	"github.com/breakwater-gw/breakwater/sim"
)

// Spend wall keys of a scenario connection (docs/spendwall.md, docs/scenarios.md):
//
//	spendWall:
//	  slowLane: true          # accept the low-priority lane offer
//	  limitReset: true        # ask for a session limit reset first
//	  orgId: 0000-...         # used by serve / replay for the reset URL; ignored here
//	  resetAnswer:            # what the simulated usage / reset endpoints say
//	    result: reset         # reset | not_limited | already_used | not_offered | failed
//	    nextAvailableIn: 168h # next_available_at, as an offset from the call
var (
	spendWallKeys   = []string{"slowLane", "limitReset", "orgId", "resetAnswer"}
	resetAnswerKeys = []string{"result", "nextAvailableIn"}
	resetResults    = []string{"reset", "not_limited", "already_used", "not_offered", "failed"}
)

// spendWall decodes a connection's spendWall block into c; it returns the
// simulated reset answer, if the block names one.
func (l *loader) spendWall(n *yaml.Node, field string, c *model.ConnectionConfig) *sim.LimitResetAnswer {
	var ans *sim.LimitResetAnswer
	l.fields(n, field, spendWallKeys, func(key, f string, k, v *yaml.Node) {
		switch key {
		case "slowLane":
			c.SpendWall.SlowLane = l.d.Bool(v, f)
		case "limitReset":
			c.SpendWall.LimitReset = l.d.Bool(v, f)
		case "orgId":
			l.d.String(v, f)
			l.warn(v, f, "ignored by the simulator (the reset URL is only built by serve and replay)")
		case "resetAnswer":
			ans = &sim.LimitResetAnswer{}
			l.fields(v, f, resetAnswerKeys, func(key, ff string, k, v *yaml.Node) {
				switch key {
				case "result":
					s := l.d.String(v, ff)
					ans.Outcome = model.ParseLimitResetResult(s)
					if ans.Outcome == model.LimitResetFailed && s != "failed" {
						l.d.Errf(v, ff, "unknown result %q (results: %s)", s, strings.Join(resetResults, ", "))
					}
				case "nextAvailableIn":
					ans.NextAvailableIn = l.d.Duration(v, ff)
				}
			})
		}
	})
	if ans != nil && !c.SpendWall.LimitReset {
		l.d.Errf(n, yamlnode.Join(field, "resetAnswer"), "is only used with limitReset: true")
	}
	return ans
}

// connAnswer is a reset answer waiting for its provider's id.
type connAnswer struct {
	conn int
	ans  sim.LimitResetAnswer
}

// addLimitResets files a provider's reset answers under provider/connection.
func (l *loader) addLimitResets(p *model.ProviderConfig, answers []connAnswer) {
	for _, a := range answers {
		if a.conn >= len(p.Connections) {
			continue
		}
		if l.sc.LimitResets == nil {
			l.sc.LimitResets = map[string]sim.LimitResetAnswer{}
		}
		l.sc.LimitResets[p.ID+"/"+p.Connections[a.conn].ID] = a.ans
	}
}

var laneNames = []string{"active", "off"}
