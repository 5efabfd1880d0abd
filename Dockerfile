FROM python:3.11-slim

WORKDIR /srv/wharf
COPY pyproject.toml constraints.txt README.md ./
COPY app ./app
COPY spark_jobs ./spark_jobs
RUN pip install --no-cache-dir -c constraints.txt .

ENV WHARF_HOST=0.0.0.0 \
    WHARF_PORT=8080 \
    WHARF_STORE_DIR=/var/lib/wharf
VOLUME /var/lib/wharf
EXPOSE 8080
CMD ["wharf"]
