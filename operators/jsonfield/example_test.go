package jsonfield_test

import (
	"fmt"

	"github.com/runnel-io/runnel/operators/jsonfield"
)

func Example() {
	e, err := jsonfield.New([]string{"device", "ts", "temp", "meta.site", "battery"})
	if err != nil {
		panic(err)
	}
	out := make([]jsonfield.Value, len(e.Paths())) // reuse across records
	doc := []byte(`{"device":"d-0042","ts":1700000000123,"temp":21.57,"meta":{"site":"north"}}`)
	if err := e.Extract(doc, out); err != nil {
		fmt.Println("dead letter:", err)
		return
	}
	ts, _ := out[1].Int()
	temp, _ := out[2].Float()
	fmt.Printf("%s %d %.2f %s %v\n", out[0].Raw, ts, temp, out[3].Raw, out[4].Kind)

	err = e.Extract([]byte(`{"device":"d-0042","temp":21.57,}`), out)
	fmt.Println(err, out[0].Kind)
	// Output:
	// d-0042 1700000000123 21.57 north missing
	// json: offset 32: invalid character '}' looking for beginning of object key string missing
}
