/** The hex test vectors of PROTOCOL.md section 11. */

export function hex(s: string): Buffer {
  return Buffer.from(s.replace(/\s+/g, ""), "hex");
}

/** Job map {"v":1,"id":"t1","shell":"echo hi"}. */
export const VECTOR_T1 = hex("83 a1 76 01 a2 69 64 a2 74 31 a5 73 68 65 6c 6c a7 65 63 68 6f 20 68 69");

/** Job map {"v":1,"id":"t2","argv":["/bin/echo","a b"],"env":{"X":"1"},"timeout_ms":5000}. */
export const VECTOR_T2 = hex(`85 a1 76 01 a2 69 64 a2 74 32 a4 61 72 67 76 92 a9 2f 62 69 6e 2f 65 63
  68 6f a3 61 20 62 a3 65 6e 76 81 a1 58 a1 31 aa 74 69 6d 65 6f 75 74 5f
  6d 73 cd 13 88`);

/** The started event {"v":1,"type":"started","seq":0,"worker":"w","attempt":1}. */
export const VECTOR_STARTED = hex(`85 a1 76 01 a4 74 79 70 65 a7 73 74 61 72 74 65 64 a3 73 65 71 00 a6 77
  6f 72 6b 65 72 a1 77 a7 61 74 74 65 6d 70 74 01`);

/** The payloads that MUST be rejected, with their error codes. */
export const REJECTION_VECTORS: [string, Buffer, string][] = [
  ["c1", hex("c1"), "bad_payload"],
  ["array", hex("93 01 02 03"), "bad_payload"],
  ["v5", hex("82 a1 76 05 a2 69 64 a2 74 36"), "bad_version"],
  ["shell-int", hex("83 a1 76 01 a2 69 64 a2 74 34 a5 73 68 65 6c 6c 2a"), "bad_field"],
  ["unknown-foo", hex("83 a1 76 01 a2 69 64 a2 74 35 a3 66 6f 6f c3"), "bad_field"],
];
