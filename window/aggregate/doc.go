// Package aggregate implements the mergeable aggregates of event-time
// windows: count, sum, min, max, avg, variance, stddev, first, last,
// distinct (HyperLogLog) and quantile (DDSketch).
//
// # Model
//
// A pipeline's aggregates compile into a Set (NewSet), which is immutable
// and shared by every goroutine. The window operator keeps one State per
// (key, window slice) and calls Add for every record; the slices of a window
// are combined with Merge. Emitted partials are encoded with AppendEncode and
// shipped to the hub, which folds the partials of many edges into its own
// State with MergeEncoded, in whatever order they arrive, and reads the
// results with Result or AppendJSON.
//
// A record reaches Add as an Input: its event time, the numeric fields the
// aggregates read (Input.Nums) and the hashes of the fields that distinct
// counts (Input.Hashes). Each Spec names its slot (Spec.Input); the pipeline
// compiler assigns slots and sizes the slices from NumInputs and HashInputs.
//
// # Nulls
//
// NaN in Nums and 0 in Hashes mean null. count() counts records; every
// other function skips null inputs. A function that saw no non-null input
// has a Null result, except count and distinct, which are 0.
//
// # Invariants
//
//   - Merge is associative and commutative and the empty State is its
//     identity, so partials can be combined in any order and tree shape.
//     Count, min, max, first, last, distinct and quantile merge exactly:
//     first and last break event-time ties by value and count -0 as +0, and
//     the sketches merge losslessly (register maxima, bin counts). Sum, avg,
//     variance and stddev are floating point: merge orders agree to rounding
//     (property-tested to 1e-9 relative), not bit for bit. Variance is
//     Welford's update per record and the parallel formula of Chan, Golub and
//     LeVeque per merge, so readings far from zero do not cancel.
//   - decode(encode(st)) has the same results as st and encodes to the same
//     bytes. Decode and MergeEncoded validate all of their input before they
//     change the State, never panic, and fail with errors wrapping
//     ErrCorrupt that name the aggregate and the byte offset.
//   - Add, Merge, AppendEncode (when dst has room), Decode, MergeEncoded,
//     Result, AppendJSON, Reset and CopyTo do not allocate for the scalar
//     aggregates (count through last). TestZeroAllocs proves it.
//
// The byte layout is in docs/formats/aggregate-state.md.
//
// # Error bounds of the sketches
//
// quantile(x, q) uses DDSketch with relative accuracy α
// (Options.QuantileAccuracy, default 0.01). DDSketch is rank based: with the
// n values sorted, the answer is within α·|x| of x, the value at rank
// floor(q·(n-1)) (ceil for negative values). The bound holds for every q, at
// any size, after any merges. A sketch costs about ln(max/min)/(2α) bins of a
// few bytes. Magnitudes below about 2.2e-308 count as 0; ±Inf and
// magnitudes above about 1.26e308 cannot be binned and are skipped (not
// counted).
//
// distinct(x) uses HyperLogLog (github.com/axiomhq/hyperloglog) with
// precision p (Options.HLLPrecision, default 14). Small sketches are sparse:
// they count distinct 25-bit hash prefixes, which is exact unless two values
// share a prefix (for 1,000 distinct values the chance of any such
// collision is about 1.5%); at p=14 that holds for a few thousand values.
// Beyond that the sketch turns dense (2^p registers) with a standard error of
// 1.04/sqrt(2^p): 0.81% at p=14, so 99.7% of estimates are within 2.4%.
// Hashes must be uniform 64-bit hashes of the field value (xxhash, say):
// raw small integers share their top bits and count as one.
//
// # Caveats
//
//   - A State is not safe for concurrent use, and neither Result nor
//     AppendEncode is read-only: both compact a sparse HyperLogLog sketch in
//     place.
//   - Counts are exact up to 2^53 records per State; Decode refuses more.
//   - Distinct and quantile allocate now and then in Add (when a sketch
//     grows), and distinct allocates in Decode and MergeEncoded (the library
//     decodes only into fresh memory). Reset replaces a HyperLogLog sketch
//     that may have turned dense instead of clearing it; see Reset.
//   - The encoding does not identify its Set: partials must be decoded with
//     the Set of the pipeline version that wrote them. Sketch options are
//     checked (ErrMismatch), but a pipeline that swaps sum for avg decodes
//     without complaint. The pipeline version must travel with the partials.
package aggregate
