// Go clients' round trip for Tidelog's interop suite: produce keyed records with headers,
// read them back through a consumer group, commit, and print one JSON document (records,
// then the group's committed offsets), the shape interop/ecosystem/clients.py reads.
//
// Usage: roundtrip franz|sarama BOOTSTRAP TOPIC GROUP COUNT
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"
)

const deadline = 60 * time.Second

// Record is one consumed record, as every client of the suite prints it.
type Record struct {
	Partition int32       `json:"partition"`
	Offset    int64       `json:"offset"`
	Key       string      `json:"key"`
	Value     string      `json:"value"`
	Headers   [][2]string `json:"headers"`
}

// Observation is what one run prints: the records read, then the group's committed offsets.
type Observation struct {
	Records   []Record         `json:"records"`
	Committed map[string]int64 `json:"committed"`
}

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: roundtrip franz|sarama BOOTSTRAP TOPIC GROUP COUNT")
		os.Exit(2)
	}
	count, err := strconv.Atoi(os.Args[5])
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var obs Observation
	switch os.Args[1] {
	case "franz":
		obs, err = franzRoundTrip(ctx, os.Args[2], os.Args[3], os.Args[4], count)
	case "sarama":
		obs, err = saramaRoundTrip(ctx, os.Args[2], os.Args[3], os.Args[4], count)
	default:
		err = fmt.Errorf("unknown client %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(obs); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
