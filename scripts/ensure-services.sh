#!/usr/bin/env bash
# Start any of the local services recur needs that is down, then wait until each answers.
#   scripts/ensure-services.sh [rabbit] [management] [redis] [postgres] [chromium] [prometheus]
# (default: all of them). "management" enables RabbitMQ's management plugin (it ships with
# the Debian package; Flower's Broker page reads queue depths from its API on 15672);
# "chromium" installs Debian's chromium with apt-get if it is missing (the Flower UI test);
# "prometheus" installs Debian's prometheus the same way (the dashboard test starts a private
# one on its own port; the package's own service is not needed).
# REDIS_PORT / REDIS_DIR choose the Redis instance (the tests start a private one).
# Exits non-zero, naming the service, if one cannot be started.
set -u
REDIS_PORT=${REDIS_PORT:-6379}
REDIS_DIR=${REDIS_DIR:-/var/lib/redis}

up_rabbit()   { timeout 5 bash -c '</dev/tcp/127.0.0.1/5672' 2>/dev/null; }
up_redis()    { [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = "PONG" ]; }
up_postgres() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
up_management() { timeout 5 bash -c '</dev/tcp/127.0.0.1/15672' 2>/dev/null; }
up_chromium() { command -v chromium >/dev/null 2>&1; }
up_prometheus() { command -v prometheus >/dev/null 2>&1; }

start_rabbit()   { rabbitmq-server -detached >/dev/null 2>&1; }
start_redis()    {
  mkdir -p "$REDIS_DIR" /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" --save "" \
    --appendonly no --dir "$REDIS_DIR" --logfile "$REDIS_DIR/redis-$REDIS_PORT.log" >/dev/null
}
start_management() { up_rabbit || start_rabbit; rabbitmq-plugins enable rabbitmq_management >/dev/null 2>&1; }
start_chromium() {
  apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 \
    || { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends chromium >/dev/null 2>&1; }
}
start_prometheus() {
  apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1 \
    || { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1; }
}
start_postgres() { pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start >/dev/null 2>&1; }

status=0
for svc in "${@:-rabbit management redis postgres chromium prometheus}"; do
  for one in $svc; do
    if "up_$one"; then echo "ensure-services: $one is up"; continue; fi
    echo "ensure-services: $one is down, starting it"
    "start_$one"
    for _ in $(seq 1 120); do "up_$one" && break; sleep 0.5; done
    if "up_$one"; then echo "ensure-services: $one started"; else
      echo "ensure-services: ERROR: could not start $one" >&2; status=1; fi
    # RabbitMQ accepts TCP before it is ready for AMQP; wait for the node itself.
    if [ "$one" = rabbit ] && up_rabbit; then timeout 120 rabbitmqctl await_startup >/dev/null 2>&1 \
      || { echo "ensure-services: ERROR: RabbitMQ did not finish starting" >&2; status=1; }; fi
  done
done
exit $status
