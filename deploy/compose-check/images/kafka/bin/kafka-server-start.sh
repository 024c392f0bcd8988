#!/bin/sh
# Stand-in for Kafka's bin/kafka-server-start.sh: the broker on the given
# server.properties, with upstream's default heap.
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1G -Xms1G}"
export KAFKA_HEAP_OPTS
exec /opt/kafka/bin/kafka-run-class.sh kafka.Kafka "$@"
