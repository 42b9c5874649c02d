package trigger_test

import (
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/trigger"
)

// TestNumbersEqual: JSON numbers are equal when they are mathematically
// equal, however they are written, with exponents of any size.
func TestNumbersEqual(t *testing.T) {
	cases := []struct {
		a, b  string
		equal bool
	}{
		{"1", "1", true},
		{"1", "1.0", true},
		{"1", "10e-1", true},
		{"1", "1e0", true},
		{"1", "0.1e1", true},
		{"1", "1E+0", true},
		{"1", "0.01e2", true},
		{"1", "2", false},
		{"1", "-1", false},
		{"1", "10", false},
		{"1", "1.0000000000000000000000000000001", false},
		{"10", "1e1", true},
		{"100", "1e2", true},
		{"120", "1.2e2", true},
		{"0.5", "5e-1", true},
		{"0.5", "50e-2", true},
		{"0.05", "5e-2", true},
		{"0", "-0", true},
		{"0", "0.0", true},
		{"0", "0e999999999", true},
		{"0", "-0.000e-99999999999999999999999", true},
		{"0", "1e-999999999", false},
		{"-1.5", "-15e-1", true},
		{"-1.5", "1.5", false},
		{"123456789012345678901234567890", "1.2345678901234567890123456789e29", true},
		{"123456789012345678901234567890", "1.2345678901234567890123456788e29", false},
		// Past float64 and big.Float's default 64-bit precision.
		{"9007199254740993", "9007199254740992", false},
		{"18446744073709551617", "18446744073709551616", false},
		{"1e999999999", "10e999999998", true},
		{"1e999999999", "1e999999998", false},
		{"17e999999999", "1.7e1000000000", true},
		// Exponents past int64, exactly.
		{"1e1000000000000000000000", "10e999999999999999999999", true},
		{"1e1000000000000000000000", "0.1e1000000000000000000001", true},
		{"1e1000000000000000000000", "1e1000000000000000000001", false},
		{"1e-1000000000000000000000", "10e-1000000000000000000001", true},
		{"1e-1000000000000000000000", "1e1000000000000000000000", false},
		{"1e999999999999999999", "10e999999999999999998", true},
		{"1e999999999999999999", "0.00001e1000000000000000004", true},
		{"10000000000e99999999999999991", "1e100000000000000001", true},
		{"10000000000e-99999999999999991", "1e-99999999999999981", true},
		{"1e9223372036854775807", "10e9223372036854775806", true},
		{"1e9223372036854775808", "0.1e9223372036854775809", true},
		{"1e-9223372036854775808", "0.1e-9223372036854775807", true},
	}
	for _, c := range cases {
		for _, pair := range [][2]string{{c.a, c.b}, {c.b, c.a}} {
			got, ok := trigger.NumbersEqual(pair[0], pair[1])
			if !ok {
				t.Fatalf("%s, %s: not read as numbers", pair[0], pair[1])
			}
			if got != c.equal {
				t.Errorf("%s == %s: %v, want %v", pair[0], pair[1], got, c.equal)
			}
		}
	}
	for _, bad := range []string{"", "-", "1.", ".5", "1e", "1e+", "0x10", "1 ", "NaN", "1.5.2", "--1"} {
		if _, ok := trigger.NumbersEqual(bad, "1"); ok {
			t.Errorf("%q read as a number", bad)
		}
	}
}

var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// exponentOf is the exponent written in a JSON number, or 0.
func exponentOf(s string) (int64, bool) {
	i := strings.IndexAny(s, "eE")
	if i < 0 {
		return 0, true
	}
	e, err := strconv.ParseInt(s[i+1:], 10, 64)
	return e, err == nil
}

// FuzzNumbersEqual compares the filter's equality with big.Rat's on
// numbers whose exponents big.Rat handles quickly, and checks on any
// exponent that moving the point (digits appended, exponent lowered to
// match) keeps a number equal to itself.
func FuzzNumbersEqual(f *testing.F) {
	f.Add("1", "1.0", uint8(3))
	f.Add("10e-1", "1", uint8(0))
	f.Add("-0.000", "0e5", uint8(1))
	f.Add("123.4500e-7", "1.2345e-5", uint8(9))
	f.Add("1e999999999999999999999", "10e999999999999999999998", uint8(2))
	f.Add("9007199254740993", "9007199254740992", uint8(1))
	f.Fuzz(func(t *testing.T, a, b string, zeros uint8) {
		if !jsonNumber.MatchString(a) || !jsonNumber.MatchString(b) || len(a) > 400 || len(b) > 400 {
			return
		}
		got, ok := trigger.NumbersEqual(a, b)
		if !ok {
			t.Fatalf("%s, %s: valid JSON numbers not read", a, b)
		}
		ea, oka := exponentOf(a)
		eb, okb := exponentOf(b)
		if oka && okb && ea > -2000 && ea < 2000 && eb > -2000 && eb < 2000 {
			x, _ := new(big.Rat).SetString(a)
			y, _ := new(big.Rat).SetString(b)
			if want := x.Cmp(y) == 0; got != want {
				t.Fatalf("%s == %s: %v, big.Rat says %v", a, b, got, want)
			}
		}
		// a with zeros more digits and its exponent lowered as many.
		mant, exp := a, "0"
		if i := strings.IndexAny(a, "eE"); i >= 0 {
			mant, exp = a[:i], strings.TrimPrefix(a[i+1:], "+")
		}
		e, _ := new(big.Int).SetString(exp, 10)
		sign, digits := "", mant
		if strings.HasPrefix(digits, "-") {
			sign, digits = "-", digits[1:]
		}
		point := len(digits)
		if i := strings.Index(digits, "."); i >= 0 {
			point, digits = i, digits[:i]+digits[i+1:]
		}
		// digits×10^zeros as an integer, exponent lowered to match:
		// 12.5e3 is 125000e-1 (zeros 3).
		lowered := new(big.Int).Add(e, big.NewInt(int64(point-len(digits)-int(zeros))))
		shifted := sign + digits + strings.Repeat("0", int(zeros)) + "e" + lowered.String()
		// The point moved left past zeros more zeros: 0.00mant × 10^(e+point+zeros).
		raised := new(big.Int).Add(e, big.NewInt(int64(point+int(zeros))))
		moved := sign + "0." + strings.Repeat("0", int(zeros)) + digits + "e" + raised.String()
		for _, same := range []string{shifted, moved} {
			if eq, ok := trigger.NumbersEqual(a, same); !ok || !eq {
				t.Fatalf("%s != %s", a, same)
			}
		}
	})
}
