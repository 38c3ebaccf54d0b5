package jsonfield

// decimal is a JSON number literal reduced to ±mant × 10^exp, with mant
// holding the significant digits (no leading or trailing zeros). When there
// are more than 19 significant digits, digits says so and mant is not
// meaningful.
type decimal struct {
	mant   uint64
	digits int // significant digits; 0 means the value is zero
	exp    int
	neg    bool
}

// expCap bounds the exponent we accumulate so 1e99999999999999999999 cannot
// overflow an int; anything near it is out of every range we care about.
const expCap = 1 << 30

// parseDecimal reads a number in RFC 8259 grammar
// (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?), filling the whole of b.
// It reports false for anything else, including the extras strconv accepts
// (inf, 0x1p3, +1, 1_000).
func parseDecimal(b []byte) (d decimal, ok bool) {
	i := 0
	if i < len(b) && b[i] == '-' {
		d.neg = true
		i++
	}
	if i >= len(b) || !isDigit(b[i]) {
		return d, false
	}
	if b[i] == '0' && i+1 < len(b) && isDigit(b[i+1]) {
		return d, false // leading zero
	}
	// zeros counts zeros seen since the last nonzero digit; they join the
	// mantissa only when another nonzero digit follows, so trailing zeros
	// end up in the exponent and leading zeros nowhere.
	zeros, frac := 0, 0
	j := i
	for ; i < len(b) && isDigit(b[i]); i++ {
	}
	zeros = d.addDigits(b[j:i], zeros)
	if i < len(b) && b[i] == '.' {
		i++
		j = i
		for ; i < len(b) && isDigit(b[i]); i++ {
		}
		if i == j {
			return d, false
		}
		frac = i - j
		zeros = d.addDigits(b[j:i], zeros)
	}
	exp := 0
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return d, false
		}
		for ; i < len(b) && isDigit(b[i]); i++ {
			if exp < expCap {
				exp = exp*10 + int(b[i]-'0')
			}
		}
		if eneg {
			exp = -exp
		}
	}
	if i != len(b) {
		return d, false
	}
	if d.digits == 0 {
		return d, true // zero, whatever the exponent
	}
	d.exp = exp - frac + zeros
	return d, true
}

// addDigits appends decimal digits to the mantissa; zeros is the count of
// zeros pending since the last nonzero digit, returned updated.
func (d *decimal) addDigits(b []byte, zeros int) int {
	for _, c := range b {
		if c == '0' {
			if d.digits > 0 {
				zeros++
			}
			continue
		}
		for ; zeros > 0; zeros-- {
			d.digits++
			if d.digits <= 19 {
				d.mant *= 10
			}
		}
		d.digits++
		if d.digits <= 19 {
			d.mant = d.mant*10 + uint64(c-'0')
		}
	}
	return zeros
}

// pow10u holds 10^0 .. 10^19, every power of ten a uint64 holds.
var pow10u = [...]uint64{
	1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19,
}

// int64 returns the exact integer value, ErrNotInteger or ErrRange.
func (d decimal) int64() (int64, error) {
	if d.digits == 0 {
		return 0, nil
	}
	if d.exp < 0 {
		// mant ends in a nonzero digit, and it sits right of the point.
		return 0, ErrNotInteger
	}
	if d.digits+d.exp > 19 {
		return 0, ErrRange // at least 10^19 > 2^63
	}
	limit := uint64(1<<63 - 1)
	if d.neg {
		limit = 1 << 63
	}
	p := pow10u[d.exp]
	if d.mant > limit/p {
		return 0, ErrRange
	}
	u := d.mant * p
	if u > limit {
		return 0, ErrRange
	}
	if d.neg {
		return int64(-u), nil // -(1<<63) wraps to math.MinInt64, as wanted
	}
	return int64(u), nil
}

func isDigit(c byte) bool { return c-'0' <= 9 }
