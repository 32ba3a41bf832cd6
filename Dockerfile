# coil on Debian 12: build, test and run from one image.
FROM debian:12
WORKDIR /src/coil
COPY deploy/install-deps.sh deploy/install-deps.sh
RUN sh deploy/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN make all
CMD ["make", "test"]
