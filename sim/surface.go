package sim

import (
	"fmt"

	"github.com/breakwater-gw/breakwater/model"
)

// Client formats (Traffic.Format): the API the client speaks. The gateway
// translates every format to every provider type through OpenAI chat
// (docs/surfaces.md), with the same flow; what changes with the format is
// which provider types can serve it at all. A target whose type cannot
// is passed over before admission (model.ReportUnsupported), as the
// gateway passes it over when its wire adapter refuses the request.
const (
	FormatChat       = "chat"
	FormatMessages   = "messages"
	FormatResponses  = "responses"
	FormatEmbeddings = "embeddings"
)

// Formats lists the scenario format names.
var Formats = []string{FormatChat, FormatMessages, FormatResponses, FormatEmbeddings}

// formatUnsupported reports whether a provider type cannot serve a client
// format: the anthropic type has no embeddings API; every type serves the
// other formats through its chat adapter.
func formatUnsupported(format, providerType string) bool {
	return format == FormatEmbeddings && providerType == "anthropic"
}

// nativeFormat reports whether a provider type serves a client format
// natively: the client's own body goes to the upstream and its events come
// back as they are (an anthropic target of a Messages request). Such a
// stream's text is not kept, so it is never resumed, and such a target
// cannot continue a stream (docs/resume.md).
func nativeFormat(format, providerType string) bool {
	return format == FormatMessages && providerType == "anthropic"
}

// providerType is the configured type of provider p ("" when unset).
func (s *sim) providerType(p string) string {
	for i := range s.sc.Topology.Providers {
		if pr := &s.sc.Topology.Providers[i]; pr.ID == p {
			return pr.Type
		}
	}
	return ""
}

// nativeResume refuses a resume attempt at a target that would be served
// natively, before it is sent, as the gateway's prefill check does: a
// local refusal, neutral for the connection; the flow moves on. It
// reports whether it refused.
func (s *sim) nativeResume(id int32, a *model.Attempt) bool {
	r := &s.reqs[id]
	if !a.Resume || !nativeFormat(s.sc.Traffic[r.item].Format, s.providerType(a.Provider)) {
		return false
	}
	err := &model.Error{Code: model.CodeUnsupportedByProviderType, Provider: a.Provider, Model: a.Model,
		Message: fmt.Sprintf("the request cannot be prefilled: %s is served natively", a.Provider)}
	_, ans := r.flow.Record(s.now, s.eng, a, model.Report{Kind: model.ReportLocal, Err: err})
	s.drain()
	if ans != nil {
		s.answer(id, ans, abortNone)
		return true
	}
	s.step(id)
	return true
}

// passedOver records an attempt the request's format cannot be served by
// and reports whether it did.
func (s *sim) passedOver(id int32, a *model.Attempt) bool {
	r := &s.reqs[id]
	format := s.sc.Traffic[r.item].Format
	if format == "" || format == FormatChat {
		return false
	}
	typ := ""
	for i := range s.sc.Topology.Providers {
		if p := &s.sc.Topology.Providers[i]; p.ID == a.Provider {
			typ = p.Type
			break
		}
	}
	if !formatUnsupported(format, typ) {
		return false
	}
	// The gateway names the connection it chose (X-Breakwater-Connection)
	// even when its type could not take the request: so does servedBy.
	r.lastConn, r.hasLast = model.ConnRef{Provider: a.Provider, Connection: a.Connection}, true
	r.flow.Record(s.now, s.eng, a, model.Report{Kind: model.ReportUnsupported, Err: &model.Error{Code: model.CodeUnsupportedByProviderType, Provider: a.Provider,
		Message: "provider type " + typ + " cannot serve the " + format + " format"}})
	s.drain()
	return true
}
