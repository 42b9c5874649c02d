package trigger

// NumbersEqual reports whether two JSON numbers as written are equal as
// the filter compares them; ok is false when either is not a number.
func NumbersEqual(a, b string) (equal, ok bool) {
	x, okx := parseDecimal(a)
	y, oky := parseDecimal(b)
	return x == y, okx && oky
}
