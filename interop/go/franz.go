package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func franzRoundTrip(ctx context.Context, bootstrap, topic, group string, count int) (Observation, error) {
	producer, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	if err != nil {
		return Observation{}, err
	}
	for i := 0; i < count; i++ {
		record := &kgo.Record{
			Topic: topic,
			Key:   []byte(fmt.Sprintf("key-%d", i)),
			Value: []byte(fmt.Sprintf("value-%d", i)),
			Headers: []kgo.RecordHeader{
				{Key: "seq", Value: []byte(strconv.Itoa(i))},
				{Key: "client", Value: []byte("franz-go")},
			},
		}
		if err := producer.ProduceSync(ctx, record).FirstErr(); err != nil {
			producer.Close()
			return Observation{}, err
		}
	}
	producer.Close()

	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		return Observation{}, err
	}
	defer consumer.Close()
	obs := Observation{Records: []Record{}, Committed: map[string]int64{}}
	for len(obs.Records) < count {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			return obs, fmt.Errorf("read %d of %d records: %w", len(obs.Records), count, ctx.Err())
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return obs, errs[0].Err
		}
		fetches.EachRecord(func(r *kgo.Record) {
			headers := [][2]string{}
			for _, h := range r.Headers {
				headers = append(headers, [2]string{h.Key, string(h.Value)})
			}
			obs.Records = append(obs.Records, Record{r.Partition, r.Offset, string(r.Key), string(r.Value), headers})
		})
	}
	if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
		return obs, err
	}
	offsets, err := kadm.NewClient(consumer).FetchOffsets(ctx, group)
	if err != nil {
		return obs, err
	}
	offsets.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			obs.Committed[strconv.Itoa(int(o.Partition))] = o.At
		}
	})
	return obs, nil
}
