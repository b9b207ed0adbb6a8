package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy"
)

// Limits that keep every loop bounded whatever the input says.
const (
	maxWorkers       = 4096
	maxRate          = 100_000
	maxInFlightLimit = 100_000
	maxDuration      = 24 * time.Hour
)

// Defaults of a chaos run.
const (
	DefaultDuration    = 20 * time.Second
	DefaultWorkers     = 4
	DefaultRate        = 40
	DefaultMaxInFlight = 256
	DefaultStreamRatio = 0.3
	DefaultSampleEvery = 100 * time.Millisecond
)

// Options configure a chaos run (Run).
type Options struct {
	// Config is the gateway's config (proxy.LoadConfig). In-process runs
	// start a gateway from it; providers whose baseURL is demo:// are served
	// by a fault upstream the run starts, one per provider; a loopback
	// http:// baseURL names a fault upstream (`breakwater upstream`) that is
	// used if it answers and started there otherwise. Required.
	Config *proxy.Config
	// Environ feeds the env settings layer (os.Environ()).
	Environ []string
	// Target is the base URL of a gateway that is already running
	// (loopback only); "" starts one in-process.
	Target string
	// ManagementKey and ClientKey default to the config's managementKey and
	// first clientKeys entry.
	ManagementKey string
	ClientKey     string
	// Schedule says which faults to inject when; nil = RandomSchedule(Seed).
	Schedule *Schedule
	// Duration is the fault phase (0 = the schedule's, else DefaultDuration).
	// The liveness phase follows it.
	Duration time.Duration
	// Seed seeds the random schedule, the load's choices and the fault
	// upstreams' probabilities (0 = the schedule's seed, else 1).
	Seed uint64
	// Load overrides the schedule's load section.
	Load LoadSpec
	// SampleEvery is how often health, upstream counters and resources are
	// sampled (default 100 ms).
	SampleEvery time.Duration
	// LivenessBound overrides the recovery bound derived from the settings.
	LivenessBound time.Duration
	// OpenStore opens the in-process gateway's store at start and at every
	// restart; nil = the config's store.url (memory when empty; a memory
	// store survives restarts inside the run).
	OpenStore func(ctx context.Context) (proxy.StateStore, error)
	// DB takes the gateway's database down and up (action db-down). When
	// nil and store.url is a loopback postgres:// URL, the run puts its own
	// TCP proxy in front of the database.
	DB interface{ SetDown(bool) }
	// NoLeakCheck skips the goroutine and file-descriptor leak checks (they
	// need the process to themselves: in-process runs, not run in parallel).
	NoLeakCheck bool
	// NoPersistCheck skips the end-of-run check that a gateway started on
	// the same store restores the final state.
	NoPersistCheck bool
	// Logger receives the gateway's logs (default: discarded).
	Logger *slog.Logger
	// Progress, when set, receives a progress line per second.
	Progress io.Writer
}

// load is the resolved load of a run.
type load struct {
	Workers     int           `json:"workers"`
	Rate        float64       `json:"rate"`
	MaxInFlight int           `json:"maxInFlight"`
	StreamRatio float64       `json:"streamRatio"`
	Models      []string      `json:"models"`
	Timeout     time.Duration `json:"-"`
	TimeoutMs   int64         `json:"timeoutMs"`
}

// resolveLoad merges the options over the schedule over the defaults.
func resolveLoad(o *LoadSpec, s *LoadSpec, topo *model.Topology, st *model.Settings) (load, error) {
	l := load{Workers: DefaultWorkers, Rate: DefaultRate, MaxInFlight: DefaultMaxInFlight, StreamRatio: DefaultStreamRatio}
	for _, src := range []*LoadSpec{s, o} {
		if src == nil {
			continue
		}
		if src.Workers != nil {
			l.Workers = *src.Workers
		}
		if src.Rate != nil {
			l.Rate = *src.Rate
		}
		if src.MaxInFlight != nil {
			l.MaxInFlight = *src.MaxInFlight
		}
		if src.StreamRatio != nil {
			l.StreamRatio = *src.StreamRatio
		}
		if len(src.Models) > 0 {
			l.Models = src.Models
		}
		if src.Timeout > 0 {
			l.Timeout = src.Timeout
		}
	}
	switch {
	case l.Workers < 0 || l.Workers > maxWorkers:
		return l, fmt.Errorf("load: workers must be in [0, %d], got %d", maxWorkers, l.Workers)
	case l.Rate < 0 || l.Rate > maxRate:
		return l, fmt.Errorf("load: rate must be in [0, %d], got %v", maxRate, l.Rate)
	case l.Workers == 0 && l.Rate == 0:
		return l, fmt.Errorf("load: no load (workers 0 and rate 0)")
	case l.MaxInFlight < 1 || l.MaxInFlight > maxInFlightLimit:
		return l, fmt.Errorf("load: maxInFlight must be in [1, %d], got %d", maxInFlightLimit, l.MaxInFlight)
	case !(l.StreamRatio >= 0 && l.StreamRatio <= 1):
		return l, fmt.Errorf("load: streamRatio must be in [0, 1], got %v", l.StreamRatio)
	}
	if len(l.Models) == 0 {
		l.Models = ModelsOf(topo)
	}
	for _, m := range l.Models {
		if ok, _ := resolvable(topo, m); !ok {
			return l, fmt.Errorf("load: model %q does not resolve on the gateway's topology", m)
		}
	}
	if len(l.Models) == 0 {
		return l, fmt.Errorf("load: the config has no models to ask for")
	}
	if l.Timeout == 0 {
		l.Timeout = ClientDeadline(st)
	}
	l.TimeoutMs = l.Timeout.Milliseconds()
	return l, nil
}

// ClientDeadline is how long a client waits for one request: the gateway's
// whole-request budget (requestBudget.deadlineMs) plus 2 s for the answer
// to travel. A request still open after it hangs.
func ClientDeadline(st *model.Settings) time.Duration {
	return st.RequestBudget.DeadlineMs.Duration() + 2*time.Second
}
