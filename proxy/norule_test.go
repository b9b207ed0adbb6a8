package proxy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestNoRuleInProxy: the gateway is a shell around model/ (docs/model.md):
// it does I/O, sleeps and arms timers, and every resilience rule is the
// model's, so the simulator, which drives the same model, cannot tell a
// different story. The checks look for the shapes a rule takes when it
// creeps into the shell; the wire adapters (adapter*.go, errors.go: the
// client's error envelope) may read statuses, as translating a wire format
// is their job. Anything else that matches must be listed in
// noRuleExceptions with its reason; an exception that no longer matches
// fails too, so the list stays true. The packages under proxy/ (metrics,
// the management API) are the shell too and are checked alike; their
// files are named by their path under proxy/.
func TestNoRuleInProxy(t *testing.T) {
	checks := []struct {
		name, why string
		re        *regexp.Regexp
	}{
		{"status", "compares an HTTP status against a classification code (4xx/5xx): that is model.Classify's",
			regexp.MustCompile(`(==|!=|<=|>=|<|>)\s*([45][0-9][0-9]\b|http\.Status(BadRequest|Unauthorized|PaymentRequired|Forbidden|NotFound|RequestTimeout|Conflict|RequestEntityTooLarge|UnprocessableEntity|TooManyRequests|InternalServerError|BadGateway|ServiceUnavailable|GatewayTimeout)\b)|\b[45][0-9][0-9]\s*(==|!=|<=|>=|<|>)`)},
		{"status-switch", "switches on a classification code: that is model.Classify's",
			regexp.MustCompile(`case\s+(http\.Status\w+|[45][0-9][0-9])\s*[,:]`)},
		{"cooldown", "computes a cooldown or backoff: the ladders are the model's (docs/cooldowns.md)",
			regexp.MustCompile(`(?i)\w*(cooldown|backoff)\w*\s*[-+*/]\s*[\w(]|[-+*/]\s*[\w.]*(cooldown|backoff)\w*\b|math\.Pow\(|<<\s*\w*(fail|attempt|strike)`)},
		{"breaker", "compares a failure count or rate against a threshold: that is the breaker's (docs/breaker.md)",
			regexp.MustCompile(`(?i)(failures?|errorRate|threshold|strikes?)\w*\s*(>=|>|<=|<)\s*\w`)},
		{"decision", "takes a selection or request-loop decision itself: that is model.Flow's (or a model step's)",
			regexp.MustCompile(`\.eng\.(Select|Begin)\(|model\.(WaitDecision|Unavailable)\(`)},
		{"gate", "keeps admission counters of its own: they are model.Gate's (docs/admission.md#concurrency-gates)",
			regexp.MustCompile(`\.(InUse|queued)\s*(\+\+|--|[-+]=)`)},
	}
	wire := regexp.MustCompile(`^(adapter\w*|errors)\.go$`)
	used := make([]bool, len(noRuleExceptions))
	files := proxySources(t)
	if len(files) == 0 {
		t.Fatal("no source files found")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			code := codeOf(line)
			for _, c := range checks {
				if !c.re.MatchString(code) || (strings.HasPrefix(c.name, "status") && wire.MatchString(f)) {
					continue
				}
				if j := noRuleException(f, c.name, line); j >= 0 {
					used[j] = true
					continue
				}
				t.Errorf("%s:%d %s: %s", f, i+1, c.why, strings.TrimSpace(line))
			}
		}
	}
	for j, e := range noRuleExceptions {
		if !used[j] {
			t.Errorf("exception %s %q in %s matches nothing any more: remove it", e.check, e.contains, e.file)
		}
	}
}

// noRuleExceptions are the lines that match a check without holding a
// rule, each with the reason.
var noRuleExceptions = []struct {
	file, check, contains, why string
}{
	{"chat.go", "status", "status >= 500 || g.conf().Server.LogRequests", "the log level of a finished request, not a resilience decision"},
	{"metrics/ops.go", "status", "status == 499", "OutcomeOf groups client statuses into metric labels for a dashboard panel"},
	{"metrics/ops.go", "status", "status == http.StatusTooManyRequests", "OutcomeOf groups client statuses into metric labels for a dashboard panel"},
	{"metrics/ops.go", "status", "status == http.StatusServiceUnavailable", "OutcomeOf groups client statuses into metric labels for a dashboard panel"},
	{"metrics/ops.go", "status", "status >= 400 && status < 500", "OutcomeOf groups client statuses into metric labels for a dashboard panel"},
	{"tracing.go", "status", "tr.status >= 400", "marks a trace span as an error for the tracing backend"},
	{"mgmt.go", "status", "resp.StatusCode == http.StatusNotFound", "a connection test's 404 gets the baseURL hint in its error text"},
	{"ops.go", "status", "res.Status == http.StatusNotFound", "a connection test's 404 logs the baseURL hint"},
	{"upstream.go", "status", "out.outcome.Status == http.StatusNotFound", "an upstream 404 notes the baseURL hint for the log; the model classifies it"},
	{"chat.go", "status", "st.Status == 499", "reads the model's answer: 499 is the status model.Flow gives a client that went away"},
	{"replica.go", "status", "rec.Status < 400", "the request-log record keeps error details only for an error answer"},
	{"replica.go", "status", "rec.Status >= 400", "the request-log record keeps error details only for an error answer"},
}

// proxySources lists the non-test Go files of proxy and the packages
// under it (path relative to proxy/, slash-separated).
func proxySources(t *testing.T) []string {
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == "testdata":
			return filepath.SkipDir
		case !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go"):
			files = append(files, filepath.ToSlash(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func noRuleException(file, check, line string) int {
	for j, e := range noRuleExceptions {
		if e.file == file && e.check == check && strings.Contains(line, e.contains) {
			return j
		}
	}
	return -1
}

// codeOf is a line without its comment and string literals (a help text
// may name a status or a cooldown).
func codeOf(line string) string {
	var b strings.Builder
	quote := byte(0)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == '\\' && quote != '`' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '`' || c == '\'':
			quote = c
		case c == '/' && i+1 < len(line) && line[i+1] == '/':
			return b.String()
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
