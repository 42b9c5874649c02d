package handler

// Exported for the external tests only.
var (
	Interpret       = interpret
	ParseRetryAfter = parseRetryAfter
)
