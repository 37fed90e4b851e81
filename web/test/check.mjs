// check.mjs — the tests' harness: each check prints ok or FAIL with the reason and the run goes on;
// failures() is the count for the exit status.
let failed = 0;
export async function check(name, fn) {
  try {
    await fn();
    console.log(`ok: ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL: ${name}: ${e.stack || e}`);
  }
}
export function fail(message) {
  failed++;
  console.log(`FAIL: ${message}`);
}
export const failures = () => failed;
