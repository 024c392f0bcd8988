#!/bin/sh
# Stand-in for Kafka's bin/kafka-storage.sh: the same class.
exec /opt/kafka/bin/kafka-run-class.sh kafka.tools.StorageTool "$@"
