package checkpoint_test

import (
	"encoding/binary"
	"hash/crc32"
)

func binaryAppendCRC(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}
