package archive

import (
	"bytes"

	"github.com/parquet-go/parquet-go"
)

// BuildFile writes rows (of schema s) as one archive Parquet file.
func BuildFile(s *Schema, rows []Row) ([]byte, error) {
	fs, err := newFileSchema(s)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := newWriter(&buf, fs)
	b := rowBuilder{fs: fs}
	var prs []parquet.Row
	for i := range rows {
		r, err := b.build(nil, &rows[i])
		if err != nil {
			return nil, err
		}
		prs = append(prs, r)
	}
	if _, err := w.WriteRows(prs); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
