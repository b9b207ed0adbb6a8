package wire

// The upstream side of the formats: what a provider sends, built from a
// chat answer. The gateway's surfaces translate chat answers for their
// clients (ChatToMessages, MsgStream, RespStream); the fault upstream
// (faults) answers each provider type in its own format through the same
// translations, and through these for what no surface serves (Gemini).

// AppendSSE appends one server-sent event: an `event:` line when name is
// not empty, the data line, and the blank line that ends the event. The
// name is a string or bytes, so a relayed event's name (bytes read off the
// wire) is written without a conversion.
func AppendSSE[N string | []byte](dst []byte, name N, data []byte) []byte {
	if len(name) > 0 {
		dst = append(dst, "event: "...)
		dst = append(dst, name...)
		dst = append(dst, '\n')
	}
	dst = append(dst, "data: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}

// ChatError is an OpenAI-shaped error body ({"error":{message,type,code}}),
// as ParseChatError reads it.
func ChatError(msg, typ, code string) []byte {
	b := appendJSONString([]byte(`{"error":{"message":`), msg)
	b = appendJSONString(append(b, `,"type":`...), typ)
	b = appendJSONString(append(b, `,"code":`...), code)
	return append(b, "}}"...)
}
