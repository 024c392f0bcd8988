#!/bin/sh
# Stand-in for Kafka's bin/kafka-console-producer.sh: the same class.
exec /opt/kafka/bin/kafka-run-class.sh org.apache.kafka.tools.ConsoleProducer "$@"
