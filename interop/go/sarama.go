package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/IBM/sarama"
)

func saramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	return cfg
}

func saramaRoundTrip(ctx context.Context, bootstrap, topic, group string, count int) (Observation, error) {
	brokers := []string{bootstrap}
	cfg := saramaConfig()
	producer, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		return Observation{}, err
	}
	for i := 0; i < count; i++ {
		msg := &sarama.ProducerMessage{
			Topic: topic,
			Key:   sarama.StringEncoder(fmt.Sprintf("key-%d", i)),
			Value: sarama.StringEncoder(fmt.Sprintf("value-%d", i)),
			Headers: []sarama.RecordHeader{
				{Key: []byte("seq"), Value: []byte(strconv.Itoa(i))},
				{Key: []byte("client"), Value: []byte("sarama")},
			},
		}
		if _, _, err := producer.SendMessage(msg); err != nil {
			producer.Close()
			return Observation{}, err
		}
	}
	if err := producer.Close(); err != nil {
		return Observation{}, err
	}

	groupClient, err := sarama.NewConsumerGroup(brokers, group, cfg)
	if err != nil {
		return Observation{}, err
	}
	handler := &collector{want: count, done: make(chan struct{})}
	consumeCtx, stop := context.WithCancel(ctx)
	go func() {
		<-handler.done
		stop()
	}()
	for consumeCtx.Err() == nil {
		if err := groupClient.Consume(consumeCtx, []string{topic}, handler); err != nil && consumeCtx.Err() == nil {
			stop()
			groupClient.Close()
			return Observation{}, err
		}
	}
	stop()
	if err := groupClient.Close(); err != nil {
		return Observation{}, err
	}
	obs := Observation{Records: handler.records, Committed: map[string]int64{}}
	if len(obs.Records) < count {
		return obs, fmt.Errorf("read %d of %d records before the deadline", len(obs.Records), count)
	}

	admin, err := sarama.NewClusterAdmin(brokers, cfg)
	if err != nil {
		return obs, err
	}
	defer admin.Close()
	partitions := map[string][]int32{}
	for _, r := range obs.Records {
		partitions[topic] = appendOnce(partitions[topic], r.Partition)
	}
	offsets, err := admin.ListConsumerGroupOffsets(group, partitions)
	if err != nil {
		return obs, err
	}
	for p, block := range offsets.Blocks[topic] {
		if block.Offset >= 0 {
			obs.Committed[strconv.Itoa(int(p))] = block.Offset
		}
	}
	return obs, nil
}

func appendOnce(list []int32, p int32) []int32 {
	for _, q := range list {
		if q == p {
			return list
		}
	}
	return append(list, p)
}

// collector gathers the claimed records, marking and committing each session's offsets.
type collector struct {
	mu      sync.Mutex
	want    int
	records []Record
	done    chan struct{}
	closed  bool
}

func (c *collector) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (c *collector) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (c *collector) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		headers := [][2]string{}
		for _, h := range msg.Headers {
			headers = append(headers, [2]string{string(h.Key), string(h.Value)})
		}
		sess.MarkMessage(msg, "")
		sess.Commit()
		c.mu.Lock()
		c.records = append(c.records, Record{msg.Partition, msg.Offset, string(msg.Key), string(msg.Value), headers})
		if len(c.records) >= c.want && !c.closed {
			c.closed = true
			close(c.done)
		}
		c.mu.Unlock()
	}
	return nil
}
