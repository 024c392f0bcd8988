#!/bin/sh
# Stand-in for Kafka's bin/kafka-broker-api-versions.sh: the same class.
exec /opt/kafka/bin/kafka-run-class.sh org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
