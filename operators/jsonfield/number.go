package jsonfield

// decimal is a JSON number literal reduced to ±mant × 10^exp. mant holds
// the first 19 significant digits (every 19-digit number fits a uint64);
// when a nonzero digit past those was dropped, trunc is set and low holds
// the power of ten of the lowest nonzero digit, which is all Int needs.
type decimal struct {
	mant  uint64
	exp   int
	low   int
	neg   bool
	trunc bool
}

// maxMantDigits is how many significant digits decimal keeps.
const maxMantDigits = 19

// expCap bounds the exponent we accumulate so 1e99999999999999999999 cannot
// overflow an int; anything near it is out of every range we care about.
const expCap = 1 << 30

// parseDecimal reads a number in RFC 8259 grammar
// (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?), filling the whole of b.
// It reports false for anything else, including the extras strconv accepts
// (inf, 0x1p3, +1, 1_000). One pass, no allocation.
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
	nd := 0       // significant digits in mant
	lastInt := -1 // index in b of the last nonzero dropped integer digit
	lastFrac := 0 // k of the last nonzero dropped fraction digit (10^-k)
	for ; i < len(b) && isDigit(b[i]); i++ {
		if nd < maxMantDigits {
			if d.mant = d.mant*10 + uint64(b[i]-'0'); d.mant != 0 {
				nd++
			}
			continue
		}
		d.exp++
		if b[i] != '0' {
			d.trunc, lastInt = true, i
		}
	}
	intEnd := i
	if i < len(b) && b[i] == '.' {
		i++
		fracStart := i
		for ; i < len(b) && isDigit(b[i]); i++ {
			if nd < maxMantDigits {
				if d.mant = d.mant*10 + uint64(b[i]-'0'); d.mant != 0 {
					nd++
				}
				d.exp--
			} else if b[i] != '0' {
				d.trunc, lastFrac = true, i-fracStart+1
			}
		}
		if i == fracStart {
			return d, false
		}
	}
	e := 0
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
			if e < expCap {
				e = e*10 + int(b[i]-'0')
			}
		}
		if eneg {
			e = -e
		}
	}
	if i != len(b) {
		return d, false
	}
	d.exp += e
	if d.trunc {
		// The dropped digits are below the kept ones, so the lowest
		// nonzero digit of the number is the last nonzero dropped one.
		if lastFrac > 0 {
			d.low = e - lastFrac
		} else {
			d.low = e + intEnd - 1 - lastInt
		}
	}
	return d, true
}

// pow10u holds 10^0 .. 10^19, every power of ten a uint64 holds.
var pow10u = [...]uint64{
	1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19,
}

// int64 returns the exact integer value, ErrNotInteger or ErrRange.
func (d decimal) int64() (int64, error) {
	if d.mant == 0 {
		return 0, nil // the kept digits are the leading ones: all zero means zero
	}
	if d.trunc {
		// More than 19 significant digits: an integer that long is at
		// least 10^19, beyond int64.
		if d.low >= 0 {
			return 0, ErrRange
		}
		return 0, ErrNotInteger
	}
	m, e := d.mant, d.exp
	for ; e < 0; e++ {
		if m%10 != 0 {
			return 0, ErrNotInteger
		}
		m /= 10 // ends within 19 rounds: m is nonzero with at most 19 digits
	}
	if e >= len(pow10u) {
		return 0, ErrRange
	}
	limit := uint64(1<<63 - 1)
	if d.neg {
		limit = 1 << 63
	}
	p := pow10u[e]
	if m > limit/p {
		return 0, ErrRange
	}
	u := m * p
	if u > limit {
		return 0, ErrRange
	}
	if d.neg {
		return int64(-u), nil // -(1<<63) wraps to math.MinInt64, as wanted
	}
	return int64(u), nil
}

func isDigit(c byte) bool { return c-'0' <= 9 }
