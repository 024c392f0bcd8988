#!/bin/sh
# Stand-in for Kafka's bin/kafka-run-class.sh: runs the class given with
# every jar of /opt/kafka/libs on the classpath. KAFKA_HEAP_OPTS and
# KAFKA_OPTS as upstream; the tools get a small heap unless told otherwise.
# shellcheck disable=SC2086 # the options are lists of flags on purpose
exec java ${KAFKA_HEAP_OPTS:--Xmx256M} -XX:+UseG1GC -Djava.awt.headless=true ${KAFKA_OPTS:-} -cp '/opt/kafka/libs/*' "$@"
