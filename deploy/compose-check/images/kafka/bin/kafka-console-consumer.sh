#!/bin/sh
# Stand-in for Kafka's bin/kafka-console-consumer.sh: the same class.
exec /opt/kafka/bin/kafka-run-class.sh org.apache.kafka.tools.consumer.ConsoleConsumer "$@"
