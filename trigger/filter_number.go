package trigger

import (
	"encoding/json"
	"strconv"
	"strings"
)

// decimal is a JSON number reduced to its value, so that two numbers are
// equal exactly when their decimals are (==): 1, 1.0, 10e-1 and 0.1e1 are
// one decimal. It is built in one pass over the number as written, whatever
// its length or exponent: a sender's 1 MiB of digits or 1e999999999 costs
// what reading it costs, never a multiplication or a string of that size.
//
// The value is 0.digits × 10^exp, or zero when digits is "".
type decimal struct {
	neg    bool
	digits string // significant digits: no leading or trailing zeros
	exp    int64  // the exponent when |exp| < maxSmallExp, else 0
	bigExp string // the exponent in decimal ("-" and digits) when |exp| ≥ maxSmallExp
}

// maxSmallExp bounds the exponents held as int64: with |written exponent|
// below it and a shift below it too (the shift is at most the number's
// length), their sum cannot overflow.
const maxSmallExp = 1_000_000_000_000_000_000 // 1e18

// parseDecimal reads a number in JSON's grammar (a leading '+' or zeros
// are tolerated); ok is false for anything else.
func parseDecimal(s string) (d decimal, ok bool) {
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		d.neg = s[i] == '-'
		i++
	}
	intStart := i
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intPart := s[intStart:i]
	var frac string
	if i < len(s) && s[i] == '.' {
		i++
		fs := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		frac = s[fs:i]
		if frac == "" {
			return decimal{}, false
		}
	}
	if intPart == "" {
		return decimal{}, false
	}
	expNeg, expDigits := false, ""
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '-' || s[i] == '+') {
			expNeg = s[i] == '-'
			i++
		}
		es := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if es == i {
			return decimal{}, false
		}
		expDigits = strings.TrimLeft(s[es:i], "0")
	}
	if i != len(s) {
		return decimal{}, false
	}

	// 0.(intPart frac) × 10^len(intPart): drop the leading zeros (each
	// one moves the point), then the trailing ones (which change nothing).
	shift := int64(len(intPart))
	intTrim := strings.TrimLeft(intPart, "0")
	shift -= int64(len(intPart) - len(intTrim))
	mant := intTrim
	if intTrim == "" {
		f := strings.TrimLeft(frac, "0")
		shift -= int64(len(frac) - len(f))
		mant = f
	} else if frac != "" {
		mant = intTrim + frac
	}
	mant = strings.TrimRight(mant, "0")
	if mant == "" {
		return decimal{}, true // zero, whatever its sign and exponent
	}
	d.digits = mant

	if len(expDigits) <= 17 {
		w, _ := strconv.ParseInt(expDigits, 10, 64) // "" is 0
		if expNeg {
			w = -w
		}
		e := w + shift
		if e > -maxSmallExp && e < maxSmallExp {
			d.exp = e
		} else {
			d.bigExp = strconv.FormatInt(e, 10)
		}
		return d, true
	}
	// |written exponent| ≥ 1e17 > |shift|: the sum keeps its sign, and its
	// magnitude is the written one plus or minus the shift.
	delta := shift
	if expNeg {
		delta = -shift
	}
	mag := addSmall(expDigits, delta)
	if len(mag) <= 18 {
		e, _ := strconv.ParseInt(mag, 10, 64)
		if expNeg {
			e = -e
		}
		if e > -maxSmallExp && e < maxSmallExp {
			d.exp = e
			return d, true
		}
	}
	if expNeg {
		mag = "-" + mag
	}
	d.bigExp = mag
	return d, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// addSmall returns mag + delta in decimal without leading zeros, for a
// decimal mag (no leading zeros) larger than |delta|.
func addSmall(mag string, delta int64) string {
	b := []byte(mag)
	carry := delta
	for i := len(b) - 1; i >= 0 && carry != 0; i-- {
		x := int64(b[i]-'0') + carry
		r := x % 10
		carry = x / 10
		if r < 0 {
			r += 10
			carry--
		}
		b[i] = byte('0' + r)
	}
	out := strings.TrimLeft(string(b), "0")
	if carry > 0 {
		out = strconv.FormatInt(carry, 10) + string(b)
	}
	return out
}

// compileValue returns v with every json.Number replaced by its decimal:
// the form a filter's constants are compared in, computed once at load.
func compileValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		if d, ok := parseDecimal(x.String()); ok {
			return d
		}
		return x // never equal to a number; cannot come from the decoder
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = compileValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = compileValue(e)
		}
		return out
	default:
		return v
	}
}
