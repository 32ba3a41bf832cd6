# coil on Debian 12: build, test and run from one image, as the unprivileged
# user coil (coild refuses to run as root).
#   docker run --rm IMAGE                  make test
#   docker run -p 8470:8470 IMAGE build/coild --listen 0.0.0.0:8470 --cache-dir /var/lib/coil/cache
FROM debian:12
COPY deploy/install-deps.sh /tmp/install-deps.sh
RUN sh /tmp/install-deps.sh && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh
RUN useradd --system --create-home --home-dir /var/lib/coil --shell /usr/sbin/nologin coil \
 && install -d -o coil -g coil /src/coil
WORKDIR /src/coil
COPY --chown=coil:coil . .
USER coil
RUN make all
CMD ["make", "test"]
