"""TypeScript types generated from openapi.yaml type a small fetch client that works against a real
broker.

openapi-typescript turns the document into types; ``tsc --strict`` checks a client written
against them (operations named by their operationIds), and node runs the compiled client: create a
topic, produce a batch, pull it back, commit an offset, read the lag, look a message up by id. A
client that gets a field's type wrong must not compile, so the types are not ``any``.

Needs node and npm (skipped with the reason otherwise); the pinned npm packages are installed once
into the pytest cache.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.api.server import BrokerProcess

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
NPM_PACKAGES = {"openapi-typescript": "7.13.0", "typescript": "5.9.3"}

COMPILER_OPTIONS = {
    "strict": True,
    "target": "es2022",
    "module": "es2022",
    "moduleResolution": "bundler",
    "lib": ["es2022", "dom"],
    "outDir": "out",
    "skipLibCheck": False,
    "noEmitOnError": True,
}
TSCONFIG = {"compilerOptions": COMPILER_OPTIONS, "files": ["client.ts"]}

CLIENT = """\
import type { components, operations } from "./schema";

type Op = keyof operations;
type JsonBody<K extends Op> = operations[K] extends {
  requestBody: { content: { "application/json": infer B } };
}
  ? B
  : never;
type JsonAnswer<K extends Op, S extends keyof operations[K]["responses"]> = operations[K]["responses"][S] extends {
  content: { "application/json": infer A };
}
  ? A
  : never;
type ErrorEnvelope = components["schemas"]["ErrorEnvelope"];

export class WharfError extends Error {
  constructor(readonly status: number, readonly envelope: ErrorEnvelope) {
    super(`${envelope.error_code} ${envelope.message}`);
  }
}

async function call<T>(base: string, method: string, path: string, body?: unknown): Promise<T> {
  const response = await fetch(base + path, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer: unknown = await response.json();
  if (!response.ok) throw new WharfError(response.status, answer as ErrorEnvelope);
  return answer as T;
}

const at = (value: string) => encodeURIComponent(value);

export const createTopic = (base: string, body: JsonBody<"createTopic">) =>
  call<JsonAnswer<"createTopic", 201>>(base, "POST", "/v1/topics", body);

export const produce = (base: string, topic: string, body: JsonBody<"produce">) =>
  call<JsonAnswer<"produce", 200>>(base, "POST", `/v1/topics/${at(topic)}/messages`, body);

export const pullMessages = (
  base: string,
  path: operations["pullMessages"]["parameters"]["path"],
  query: NonNullable<operations["pullMessages"]["parameters"]["query"]>,
) => {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null) search.set(name, String(value));
  }
  return call<JsonAnswer<"pullMessages", 200>>(
    base, "GET", `/v1/topics/${at(path.topic)}/queues/${path.queue_id}/messages?${search}`,
  );
};

export const commitOffsets = (base: string, group: string, body: JsonBody<"commitOffsets">) =>
  call<JsonAnswer<"commitOffsets", 200>>(base, "PUT", `/v1/groups/${at(group)}/offsets`, body);

export const getOffsets = (base: string, group: string, topic: string) =>
  call<JsonAnswer<"getOffsets", 200>>(base, "GET", `/v1/groups/${at(group)}/offsets?topic=${at(topic)}`);

export const getMessage = (base: string, msgId: string) =>
  call<JsonAnswer<"getMessage", 200>>(base, "GET", `/v1/messages/${at(msgId)}`);

declare const process: { argv: string[] };

async function main(base: string): Promise<void> {
  const topic = "typescript-orders";
  const created = await createTopic(base, { name: topic, queues: 2 });
  const produced = await produce(base, topic, {
    messages: [0, 1, 2].map((n) => ({ body: `order ${n}`, tags: "TagA", keys: [`order-${n}`], queue_id: 0 })),
  });
  const pulled = await pullMessages(base, { topic, queue_id: 0 }, { offset: 0, max_messages: 10 });
  await commitOffsets(base, "typescript-billing", { offsets: [{ topic, queue_id: 0, offset: 2 }] });
  const offsets = await getOffsets(base, "typescript-billing", topic);
  const message = await getMessage(base, produced.results[0].msg_id);
  let missing: number | null = null;
  try {
    await getMessage(base, "0".repeat(32));
  } catch (error) {
    if (error instanceof WharfError) missing = error.envelope.error_code;
  }
  console.log(JSON.stringify({
    created: "name" in created ? created.name : null,
    offsets: produced.results.map((result) => result.queue_offset),
    bodies: pulled.messages.map((pulledMessage) => pulledMessage.body),
    lag: offsets.offsets.map((row) => [row.queue_id, row.committed_offset, row.lag]),
    message: message.body,
    missing,
  }));
}

main(process.argv[2]);
"""

# Each must be refused by tsc: a number as a message body, an unknown field, a wrong operation.
MISUSES = [
    'produce("", "t", { messages: [{ body: 1 }] });',
    'commitOffsets("", "g", { offsets: [{ topic: "t", queue_id: 0, offset: 1, extra: true }] });',
    'pullMessages("", { topic: "t" }, {});',
]


@pytest.fixture(scope="module")
def npm_bin(request: pytest.FixtureRequest) -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed: the TypeScript client is not checked")
    pins = "-".join(f"{name}@{version}" for name, version in sorted(NPM_PACKAGES.items()))
    directory = request.config.cache.mkdir(f"npm-{pins}")
    bin_dir = directory / "node_modules" / ".bin"
    if not ((bin_dir / "tsc").exists() and (bin_dir / "openapi-typescript").exists()):
        (directory / "package.json").write_text(json.dumps({"private": True}))
        install = subprocess.run(
            [
                *("npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--save-exact"),
                *(f"{name}@{version}" for name, version in NPM_PACKAGES.items()),
            ],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if install.returncode != 0:
            pytest.skip(f"npm could not install {pins}: {install.stderr.strip()[-500:]}")
    return bin_dir


@pytest.fixture(scope="module")
def project(npm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("typescript-client")
    generate = subprocess.run(
        [
            *(str(npm_bin / "openapi-typescript"), str(ROOT / "openapi.yaml")),
            *("-o", str(directory / "schema.d.ts")),
            # A field with a default may be left out of a request: do not type it as always there.
            *("--default-non-nullable", "false"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert generate.returncode == 0, generate.stdout + generate.stderr
    (directory / "tsconfig.json").write_text(json.dumps(TSCONFIG, indent=2))
    (directory / "package.json").write_text(json.dumps({"private": True, "type": "module"}))
    (directory / "client.ts").write_text(CLIENT)
    return directory


def tsc(npm_bin: Path, directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(npm_bin / "tsc"), "-p", str(directory)],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_client_type_checks_and_works(npm_bin: Path, project: Path, broker: BrokerProcess) -> None:
    compiled = tsc(npm_bin, project)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    run = subprocess.run(
        ["node", str(project / "out" / "client.js"), broker.url], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(run.stdout) == {
        "created": "typescript-orders",
        "offsets": [0, 1, 2],
        "bodies": ["order 0", "order 1", "order 2"],
        "lag": [[0, 2, 1], [1, None, 0]],
        "message": "order 0",
        "missing": 40404,
    }


def test_a_client_that_misuses_the_types_does_not_compile(npm_bin: Path, project: Path) -> None:
    misused = project.parent / f"{project.name}-misuse"
    shutil.copytree(project, misused, ignore=shutil.ignore_patterns("out"))
    files = [f"misuse{number}.ts" for number in range(len(MISUSES))]
    for name, misuse in zip(files, MISUSES, strict=True):
        functions = "createTopic, produce, pullMessages, commitOffsets, getOffsets, getMessage"
        (misused / name).write_text(f'import {{ {functions} }} from "./client";\n{misuse}\n')
    options = {**COMPILER_OPTIONS, "noEmit": True}
    config = {"compilerOptions": options, "files": ["client.ts", *files]}
    (misused / "tsconfig.json").write_text(json.dumps(config, indent=2))
    compiled = tsc(npm_bin, misused)
    assert compiled.returncode != 0
    failing = {line.split("(", 1)[0] for line in compiled.stdout.splitlines() if ": error TS" in line}
    assert failing == set(files), compiled.stdout
