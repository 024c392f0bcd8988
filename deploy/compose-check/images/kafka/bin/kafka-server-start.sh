#!/bin/sh
# Stand-in for Kafka's bin/kafka-server-start.sh: the broker on the given
# server.properties, with upstream's default heap, logging at info.
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1G -Xms1G}"
KAFKA_STANDIN_LOG_LEVEL="${KAFKA_STANDIN_LOG_LEVEL:-info}"
export KAFKA_HEAP_OPTS KAFKA_STANDIN_LOG_LEVEL
exec /opt/kafka/bin/kafka-run-class.sh kafka.Kafka "$@"
