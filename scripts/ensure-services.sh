#!/usr/bin/env bash
# Start any of the local services recur needs (RabbitMQ, Redis, PostgreSQL) that is down,
# then wait until each answers. Exits non-zero, naming the service, if one cannot be started.
set -u

up_rabbit()   { timeout 5 bash -c '</dev/tcp/127.0.0.1/5672' 2>/dev/null; }
up_redis()    { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = "PONG" ]; }
up_postgres() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }

start_rabbit()   { rabbitmq-server -detached >/dev/null 2>&1; }
start_redis()    {
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log >/dev/null
}
start_postgres() { pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start >/dev/null 2>&1; }

status=0
for svc in rabbit redis postgres; do
  if "up_$svc"; then echo "ensure-services: $svc is up"; continue; fi
  echo "ensure-services: $svc is down, starting it"
  "start_$svc"
  for _ in $(seq 1 120); do "up_$svc" && break; sleep 0.5; done
  if "up_$svc"; then echo "ensure-services: $svc started"; else
    echo "ensure-services: ERROR: could not start $svc" >&2; status=1; fi
done
# RabbitMQ accepts TCP before it is ready for AMQP; wait for the node itself.
if up_rabbit; then timeout 120 rabbitmqctl await_startup >/dev/null 2>&1 || {
  echo "ensure-services: ERROR: RabbitMQ did not finish starting" >&2; status=1; }; fi
exit $status
