// Resolution cost with a ledger of N grants: fresh (from the launch cache,
// and reading the ledger, as a first launch after a change does), moved (by
// file handle and by bounded search). Prints figures; asserts nothing.
//   grants-benchmark STATE_DIR WORK_DIR COUNT
// Leaves WORK_DIR/vault (granted) and WORK_DIR/vault.bookmark for launch timing.
@preconcurrency import Glibc
import Grants
import Sandbox

func now() -> Double {
    var t = timespec()
    clock_gettime(CLOCK_MONOTONIC, &t)
    return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
}

func median(_ runs: Int, before setup: () -> Void = {}, _ body: () throws -> Void) rethrows -> Double {
    var samples: [Double] = []
    for _ in 0..<runs {
        setup()
        let start = now()
        try body()
        samples.append(now() - start)
    }
    return samples.sorted()[samples.count / 2]
}

let arguments = CommandLine.arguments
guard arguments.count == 4, let count = Int(arguments[3]), count >= 1 else {
    fputs("usage: grants-benchmark STATE_DIR WORK_DIR COUNT\n", stderr)
    exit(2)
}
let work = arguments[2]
let vault = work + "/vault"
var partial = ""
for component in work.split(separator: "/") { partial += "/" + component; mkdir(partial, 0o700) }
mkdir(vault, 0o700)
let broker = try GrantBroker(state: StateDirectory(path: arguments[1]))
let app = try AppID("com.example.memo")

// Fill the ledger: the same folder granted to many apps, in large transactions.
var filled = try broker.count()
let fillStart = now()
while filled < count - 1 {
    let batch = min(50_000, count - 1 - filled)
    _ = try broker.grant((0..<batch).map { (try! AppID("com.example.filler\(filled + $0)"), vault, GrantAccess.readWrite) })
    filled += batch
}
let fillSeconds = now() - fillStart
let issued = try broker.grant(app: app, folder: vault, access: .readWrite)
try BookmarkFile(path: work + "/vault.bookmark", trust: LinkTrust(appFolders: [])).replace(with: issued.bookmark)
let total = try broker.count()

func ms(_ seconds: Double) -> String { "\(Double(Int(seconds * 1e7)) / 10) µs" }

@MainActor func expect(_ status: BookmarkStatus, _ options: GrantBroker.ResolutionOptions = []) throws {
    let found = try broker.resolve(issued.bookmark, app: app, options: options).status
    precondition(found == status, "expected \(status), found \(found)")
}

let fresh = try median(2000) { try expect(.fresh) }
// Each time in a new broker, without the cache (which the read then writes).
let freshFromLedger = try median(500, before: { unlink(arguments[1] + "/ledger.cache") }) {
    let found = try GrantBroker(state: StateDirectory(path: arguments[1])).resolve(issued.bookmark, app: app).status
    precondition(found == .fresh, "expected fresh, found \(found)")
}
let freshFromCache = try median(500) {
    let found = try GrantBroker(state: StateDirectory(path: arguments[1])).resolve(issued.bookmark, app: app).status
    precondition(found == .fresh, "expected fresh, found \(found)")
}
rename(vault, work + "/vault-moved")
let movedByHandle = try median(500) { try expect(.moved) }
let movedBySearch = try median(200) { try expect(.moved, .withoutFileHandles) }
rename(work + "/vault-moved", vault)
let list = try median(3) { _ = try broker.list(app: app) }

print("ledger: \(total) grants" + (fillSeconds > 0.01 ? " (filled in \(Int(fillSeconds)) s)" : ""))
print("  resolve, fresh (one broker):       \(ms(fresh))")
print("  open + resolve, reading the ledger: \(ms(freshFromLedger))")
print("  open + resolve, launch cache:      \(ms(freshFromCache))")
print("  resolve, moved (open_by_handle_at): \(ms(movedByHandle))")
print("  resolve, moved (bounded search):    \(ms(movedBySearch))")
print("  grants list --app (one app):       \(ms(list))")
