#!/bin/sh
# Stand-in for Kafka's bin/kafka-run-class.sh: runs the class given with
# every jar of /opt/kafka/libs on the classpath. KAFKA_HEAP_OPTS and
# KAFKA_OPTS as upstream; the tools get a small heap unless told otherwise.
# The tools log warnings and errors only, as upstream's tools-log4j2.yaml
# has them; the broker logs at info (kafka-server-start.sh).
# shellcheck disable=SC2086 # the options are lists of flags on purpose
exec java ${KAFKA_HEAP_OPTS:--Xmx256M} -XX:+UseG1GC -Djava.awt.headless=true \
  -Dorg.slf4j.simpleLogger.defaultLogLevel="${KAFKA_STANDIN_LOG_LEVEL:-warn}" \
  ${KAFKA_OPTS:-} -cp '/opt/kafka/libs/*' "$@"
