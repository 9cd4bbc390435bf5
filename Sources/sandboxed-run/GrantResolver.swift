@preconcurrency import Glibc
import ArgumentParser
import Grants
import Sandbox

enum StaleChoice: String, ExpressibleByArgument, CaseIterable {
    case fail, prompt, follow
}

enum MissingChoice: String, ExpressibleByArgument, CaseIterable {
    case fail, prompt
}

/// Turns `--grant NAME=FILE` into a Landlock rule on the verified folder.
struct GrantResolver {
    let app: AppID
    let policy: Policy
    let onStale: StaleChoice
    let onMissing: MissingChoice
    let broker: GrantBroker

    static var hasTerminal: Bool {
        guard isatty(0) == 1 else { return false }
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC)
        if tty >= 0 { close(tty) }
        return tty >= 0
    }

    func resolve(_ spec: String) throws -> (FolderRule, String) {
        guard let equals = spec.firstIndex(of: "="), !spec[..<equals].isEmpty, equals != spec.index(before: spec.endIndex),
              spec[..<equals].allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }) else {
            throw SandboxError.usage("--grant '\(spec)': write NAME=FILE, NAME of letters, digits and _ (for example VAULT=vault.bookmark)")
        }
        let name = spec[..<equals].uppercased()
        let file = Broker.absolute(String(spec[spec.index(after: equals)...]))
        let fail = { (message: String) in SandboxError.usage("grant \(name) (\(file)): \(message)") }
        guard let allowed = GrantAccess.readWrite.pathAccess(allowedBy: policy) else {
            throw fail("policy \(policy.source) takes no user-selected folders (com.apple.security.files.user-selected.read-write or read-only)")
        }
        if access(file, F_OK) != 0 {
            guard onMissing == .prompt else {
                throw fail("no bookmark there yet: make one with `sandboxed-run pick --app \(app) -o \(file)`, or pass --on-missing prompt")
            }
            _ = try Broker.pick(app: app, access: allowed == .readWrite ? .readWrite : .readOnly, selected: nil, broker: broker) {
                try Broker.write($0, to: file)
            }
        }

        var resolution = try broker.resolve(try Broker.read(file), app: app)
        switch (resolution.status, onStale) {
        case (.fresh, _) where !resolution.isStale:
            break
        case (.fresh, .follow), (.moved, .follow):
            try Broker.write(try broker.renew(resolution, app: app), to: file)
            Console.write("sandboxed-run: grant \(name): \(resolution.message); bookmark rewritten\n")
        case (.fresh, _):
            Console.warning("grant \(name): \(resolution.message) (--on-stale follow rewrites it)")
        case (.moved, .prompt):
            let start = resolution.currentPath.map { String($0[..<($0.lastIndex(of: "/") ?? $0.endIndex)]) }
            let issued = try Broker.pick(
                app: app, access: resolution.access ?? .readOnly, selected: nil, startingAt: start,
                highlight: resolution.currentPath, broker: broker) { try Broker.write($0, to: file) }
            resolution = try broker.resolve(issued.bookmark, app: app)
            guard resolution.status == .fresh else { throw fail(resolution.message) }
        case (.moved, .fail):
            throw fail("\(resolution.message). Pass --on-stale follow to accept the new place, or --on-stale prompt to choose again.")
        default:
            // Replaced, missing, revoked, wrong app and invalid are never followed.
            throw fail("\(resolution.status.rawValue): \(resolution.message)")
        }
        guard let folder = resolution.folder, let path = resolution.currentPath else { throw fail("no folder was resolved") }
        // The folder may have come to hold the broker's own state since it was granted.
        try broker.checkNotProtected(folder, path: path)
        var granted = (resolution.access ?? .readOnly).pathAccess(allowedBy: policy) ?? .readOnly
        if resolution.access == .readWrite, allowed == .readOnly {
            Console.warning("grant \(name): policy \(policy.source) allows user-selected folders read-only; \(path) is read-only")
            granted = .readOnly
        }
        return (FolderRule(name: name, path: path, descriptor: folder, access: granted), "SANDBOX_GRANT_\(name)")
    }
}
