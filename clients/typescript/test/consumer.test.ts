// The package as a consumer gets it: `npm pack`, install the tarball into a new project, and
// type-check test-consumer/consumer.ts with strict and without skipLibCheck. consumer.ts marks
// lines that must not compile with ts-expect-error (a wrong outcome, a missing field, a field that does not exist), so
// this fails both when the published types are broken and when they are `any`.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = resolve(fileURLToPath(import.meta.url), "..", "..", "..");

function run(cmd: string, args: string[], cwd: string): string {
  try {
    return execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(" ")} failed in ${cwd}:\n${e.stdout ?? ""}${e.stderr ?? e.message}`);
  }
}

// The package as a fresh checkout holds it: its sources without dist/ (the devDependencies linked
// from this one's node_modules, as `npm ci` installs them). `npm pack` must build it (prepack).
function cleanCheckout(work: string): string {
  const dir = join(work, "checkout");
  mkdirSync(dir);
  for (const name of ["package.json", "package-lock.json", "tsconfig.json", "openapi.json", "README.md"]) {
    copyFileSync(join(root, name), join(dir, name));
  }
  for (const name of ["src", "test", "scripts", "test-consumer"]) cpSync(join(root, name), join(dir, name), { recursive: true });
  symlinkSync(join(root, "node_modules"), join(dir, "node_modules"), "dir");
  assert.ok(!existsSync(join(dir, "dist")));
  return dir;
}

test("the packed tarball type-checks in a strict consumer project, and wrong fields do not", { timeout: 600_000 }, () => {
  const work = mkdtempSync(join(tmpdir(), "worldgraph-consumer-"));
  try {
    const packed = JSON.parse(run("npm", ["pack", "--json", "--pack-destination", work], cleanCheckout(work)));
    const tarball = join(work, packed[0].filename);
    const files: string[] = packed[0].files.map((f: { path: string }) => f.path);
    for (const f of ["dist/src/index.js", "dist/src/index.d.ts", "dist/src/schema.d.ts"]) {
      assert.ok(files.includes(f), `the tarball of a clean checkout ships no ${f} (prepack builds it): ${files}`);
    }
    const project = join(work, "consumer");
    mkdirSync(join(project, "src"), { recursive: true });
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
    writeFileSync(join(project, "tsconfig.json"), JSON.stringify({
      compilerOptions: { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", strict: true,
                         noEmit: true, types: [], skipLibCheck: false },
      include: ["src"],
    }));
    copyFileSync(join(root, "test-consumer", "consumer.ts"), join(project, "src", "consumer.ts"));
    // openapi-fetch comes from the registry (or npm's cache after `npm ci`)
    run("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", tarball], project);
    const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
    run(process.execPath, [tsc, "-p", join(project, "tsconfig.json")], project);

    // The same file without its @ts-expect-error lines: each of those lines is a compile error.
    const source = readFileSync(join(root, "test-consumer", "consumer.ts"), "utf8");
    const expected = source.split("\n").filter((l) => l.trim().startsWith("// @ts-expect-error")).length;
    writeFileSync(join(project, "src", "consumer.ts"), source.replaceAll("// @ts-expect-error", "//"));
    let output = "";
    try {
      execFileSync(process.execPath, [tsc, "-p", join(project, "tsconfig.json")], { cwd: project, encoding: "utf8" });
    } catch (err) {
      output = (err as { stdout: string }).stdout;
    }
    const errors = output.split("\n").filter((l) => /error TS\d+/.test(l));
    assert.equal(errors.length, expected, `expected ${expected} type errors, got:\n${output}`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});
