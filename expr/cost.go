package expr

import (
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
)

// estimator bounds the size of what the variables hold, for the static
// cost estimate: without it a string or list read from the body would
// count as unbounded, and every comparison would be over any limit. Every
// string, list or map read from event, body, headers or events is at most
// Bounds.Body bytes (elements), a step's output at most Bounds.Output, and
// events at most Bounds.Gathered long.
type estimator struct{ b Bounds }

func (e estimator) EstimateCallCost(function, overloadID string, target *cost.AstNode, args []cost.AstNode) *cost.CallEstimate {
	return nil
}

func (e estimator) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	if n.ComputedSize() != nil {
		return nil
	}
	switch n.Type().Kind() {
	case types.StringKind, types.BytesKind, types.ListKind, types.MapKind, types.DynKind:
	default:
		return nil
	}
	max := e.b.Body
	if p := n.Path(); len(p) > 0 {
		switch {
		case p[0] == VarSteps:
			max = e.b.Output
		case p[0] == VarEvents && len(p) == 1:
			max = e.b.Gathered
		}
	}
	if max <= 0 {
		max = 1 << 20
	}
	return &cost.SizeEstimate{Min: 0, Max: uint64(max)}
}
