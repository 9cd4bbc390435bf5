@preconcurrency import Glibc
import ArgumentParser
import AppSandbox
import SystemPackage

/// Running sandboxes that hold grants: what `grants revoke` reports and
/// offers to end, and what `grants holders` lists.
enum Holding {
    /// How long a sandbox's launcher has after SIGTERM before SIGKILL.
    static let grace = 5.0
    /// How long `revoke` waits for launchers to detach revoked live grants
    /// (they read the ledger when it changes, and at least once a second).
    static let detachWait = 3.0

    static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// One line for a sandbox: its launcher's pid, app and view.
    static func headline(_ record: SandboxRecord) -> String {
        "pid \(record.launcher.pid)  \(Printable.path(record.app))  \(record.view.rawValue) view"
    }

    /// The command line, each word escaped (its bytes came from whoever named the files in it).
    static func commandLine(_ record: SandboxRecord) -> String {
        let words = record.command.map { word -> String in
            let shown = Printable.path(bytes: word)
            return shown.isEmpty || shown.contains(" ") || shown.contains("'") || shown.contains("\"")
                ? "'" + shown.replacingAll("'", with: "\\'") + "'" : shown
        }
        return words.joined(separator: " ") + (record.omittedArguments > 0 ? " … (\(record.omittedArguments) more)" : "")
    }

    /// A grant, how it came and what revoking it does: the two are said
    /// apart, since a launch-time grant with a mount of its own (private
    /// view) is taken away as an attached one is.
    static func grantLine(_ held: SandboxRecord.Held) -> String {
        let origin = switch held.origin {
        case .launch: "given at launch"
        case .attached: "attached while running"
        case .unrecorded: "given at launch or attached while running (an earlier sandboxed-run did not record which)"
        }
        let revocation = held.revocation == .takenAway ? "revoking it takes it away" : "revoking it leaves it reachable until the sandbox ends"
        return "\(Printable.path(bytes: held.path.bytes))  (grant \(held.grant), \(origin); \(revocation))"
    }

    static func describe(_ record: SandboxRecord, grants: [SandboxRecord.Held]) -> [String] {
        ["  " + headline(record)] + grants.map { "      " + grantLine($0) } + ["      command: " + commandLine(record)]
    }

    /// Asks on the terminal; anything but y or yes is no.
    static func confirm(_ question: String) -> Bool {
        fflush(stdout)  // what is asked about is printed first
        let tty = Glibc.open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
        guard tty >= 0 else { return false }
        defer { close(tty) }
        let prompt = Array((question + " [y/N] ").utf8)
        _ = prompt.withUnsafeBytes { write(tty, $0.baseAddress, $0.count) }
        var answer: [UInt8] = []
        var byte: UInt8 = 0
        while answer.count < 64 {
            let got = read(tty, &byte, 1)
            if got < 0 && errno == EINTR { continue }
            if got <= 0 || byte == UInt8(ascii: "\n") { break }
            answer.append(byte)
        }
        let text = String(decoding: answer, as: UTF8.self).lowercased().trimmingCharacters(in: " \t\r")
        return text == "y" || text == "yes"
    }

    /// Ends each sandbox, saying what became of it; true when all ended.
    static func end(_ records: [SandboxRecord], in running: RunningSandboxes) -> Bool {
        var all = true
        for record in records {
            let who = "pid \(record.launcher.pid) (\(Printable.path(record.app)))"
            switch running.end(record, grace: grace) {
            case .ended: print("ended \(who)")
            case .killed: print("killed \(who): it did not end within \(Int(grace)) s of SIGTERM; the kernel ends its sandbox with it")
            case .gone: print("\(who) had ended already")
            case .failed(let errno):
                print("could not end \(who): \(errno)")
                all = false
            }
        }
        return all
    }
}

extension String {
    fileprivate func replacingAll(_ target: Character, with replacement: String) -> String {
        var out = ""
        for character in self { if character == target { out += replacement } else { out.append(character) } }
        return out
    }

    fileprivate func trimmingCharacters(in set: String) -> String {
        var text = Substring(self)
        while let first = text.first, set.contains(first) { text = text.dropFirst() }
        while let last = text.last, set.contains(last) { text = text.dropLast() }
        return String(text)
    }
}

extension GrantsCommand {
    struct Holders: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "holders",
            abstract: "List running sandboxes that hold grants.",
            discussion: """
                One entry per sandbox: its launcher's pid (the process `grants revoke --end-holders` signals), \
                the app, the view, each grant it holds and its command line, escaped. Each grant says how it came \
                (given at launch, or attached while running) and what revoking it does: takes it away (every attached \
                grant, and in the private view one given at launch with a mount of its own) or leaves it reachable \
                until the sandbox ends (in the host view every grant given at launch, a Landlock rule; in the private \
                view one that shares a mount that stays). Records of launchers that ended without removing \
                them are not shown, and are removed.
                """)
        @Option(help: "Only this app's sandboxes.") var app: String?

        func run() throws {
            let filter = try app.map { try AppID($0) }
            let survey = try SandboxSession.cli().runningSandboxes().survey()
            let records = survey.running.filter { filter == nil || $0.app == filter!.rawValue }
            if records.isEmpty { print("no running sandbox holds a grant") }
            for record in records {
                Holding.describe(record, grants: record.grants).forEach { print($0) }
            }
            if !survey.elsewhere.isEmpty {
                print("\(survey.elsewhere.count) sandbox record(s) made in another pid namespace: they cannot be checked from here")
            }
        }
    }
}

/// What `grants revoke` says of the running sandboxes that hold a revoked grant.
struct RevokeReport {
    let running: RunningSandboxes
    let named: Set<GrantID>

    func holds(_ record: SandboxRecord, _ revocation: SandboxRecord.Revocation) -> [SandboxRecord.Held] {
        record.grants.filter { named.contains($0.grant) && $0.revocation == revocation }
    }

    /// Reports and, when asked, ends; true when no running sandbox still
    /// holds a revoked grant. `before`: the records as they were before the
    /// revocation was written, so that a launcher that cut its folder before
    /// this first looks is still reported as cut.
    func run(end: Bool?, before: RunningSandboxes.Survey? = nil) throws -> Bool {
        guard !named.isEmpty else { return true }
        var survey = try running.survey()
        // Folders that are taken away (attached, or given at launch with a mount of their own):
        // their launchers detach them; wait until the records say so (read before revoking, when it could).
        let cutting = (before?.running ?? survey.running).filter { !holds($0, .takenAway).isEmpty }
        let deadline = Holding.now() + Holding.detachWait
        while survey.running.contains(where: { !holds($0, .takenAway).isEmpty }), Holding.now() < deadline {
            usleep(20_000)
            survey = try running.survey()
        }
        // A launcher whose record is gone ended its sandbox: the command
        // still held the folder (a descriptor or working directory in it),
        // which is never left detached under it.
        // (A record also goes when its last grant was taken away: its launcher still runs.)
        // A launcher removes its record just before it exits: wait a moment for it to be gone.
        func exits(_ record: SandboxRecord) -> Bool {
            let until = Holding.now() + 0.3
            while (try? record.launcher.state()) == .running {
                guard Holding.now() < until else { return false }
                usleep(10_000)
            }
            return true
        }
        // Ended, and why: a launcher that could not take the folder away
        // says so in its record before it ends its sandbox; a record gone
        // without a word is a sandbox that ended on its own meanwhile.
        let endedWhy = survey.ending.filter { record in cutting.contains { $0.launcher == record.launcher } }
        let ended = cutting.filter { record in
            !survey.running.contains { $0.launcher == record.launcher }
                && (endedWhy.contains { $0.launcher == record.launcher } || exits(record))
        }
        func why(_ record: SandboxRecord) -> SandboxRecord.Ending? { endedWhy.first { $0.launcher == record.launcher }?.ending }
        let cut = cutting.filter { record in
            !ended.contains { $0.launcher == record.launcher }
                && !survey.running.contains { $0.launcher == record.launcher && !holds($0, .takenAway).isEmpty }
        }
        let kept = survey.running.filter { !holds($0, .keptUntilEnd).isEmpty }
        let uncut = survey.running.filter { !holds($0, .takenAway).isEmpty }
        let elsewhere = survey.elsewhere.filter { record in record.grants.contains { named.contains($0.grant) } }

        if !cut.isEmpty {
            print("cut in \(cut.count) running sandbox\(cut.count == 1 ? "" : "es") (private view): the launcher took the folder away, "
                + "and every lookup in it fails (nothing in the sandbox held it):")
            for record in cut { describeCut(record, before: cutting, after: survey) }
        }
        let heldOpen = ended.filter { why($0) == .held }
        let failed = ended.filter { if case .failed = why($0) { true } else { false } }
        let gone = ended.filter { why($0) == nil }
        if !heldOpen.isEmpty {
            print("ended \(heldOpen.count) running sandbox\(heldOpen.count == 1 ? "" : "es") (private view) that still held the folder open "
                + "(a descriptor or working directory in it, or a file open there): a folder is never taken away from under what the command holds:")
            for record in heldOpen { describeCut(record, before: cutting, after: nil) }
        }
        if !failed.isEmpty {
            print("ended \(failed.count) running sandbox\(failed.count == 1 ? "" : "es") (private view) whose launcher could not take the folder "
                + "away, rather than leave the folder reachable:")
            for record in failed {
                describeCut(record, before: cutting, after: nil)
                if case .failed(let reason) = why(record) { print("      why: " + Printable.message(reason)) }
            }
        }
        if !gone.isEmpty {
            print("\(gone.count) running sandbox\(gone.count == 1 ? "" : "es") ended meanwhile (its command exited, or its launcher was stopped): "
                + "it no longer reaches the folder:")
            for record in gone { describeCut(record, before: cutting, after: nil) }
        }
        // Read: its launcher has exited, or will without writing it again.
        for record in endedWhy { running.remove(record.launcher) }
        let holders = kept + uncut.filter { record in !kept.contains { $0.launcher == record.launcher } }
        if !kept.isEmpty {
            print("still held by \(kept.count) running sandbox\(kept.count == 1 ? "" : "es"): a folder given at launch that is a Landlock rule "
                + "(host view) or shares a mount that stays (private view) cannot be taken back from a running command, "
                + "so access continues until the sandbox ends:")
            for record in kept { Holding.describe(record, grants: holds(record, .keptUntilEnd)).forEach { print($0) } }
        }
        if !uncut.isEmpty {
            print("not yet cut after \(Int(Holding.detachWait)) s in \(uncut.count) running sandbox\(uncut.count == 1 ? "" : "es"): "
                + "its launcher has not detached the folder (it tries again every second):")
            for record in uncut { Holding.describe(record, grants: holds(record, .takenAway)).forEach { print($0) } }
        }
        if !elsewhere.isEmpty {
            print("\(elsewhere.count) sandbox record(s) made in another pid namespace name a revoked grant: they cannot be checked or ended from here")
        }
        guard !holders.isEmpty else { return elsewhere.isEmpty }
        let ending = end ?? (Picking.hasTerminal
            && Holding.confirm("End \(holders.count == 1 ? "this sandbox" : "these \(holders.count) sandboxes") now (SIGTERM, then SIGKILL after \(Int(Holding.grace)) s)?"))
        guard ending else {
            print("nothing was ended: run `sandboxed-run grants revoke` again with --end-holders to end them")
            return false
        }
        return Holding.end(holders, in: running) && elsewhere.isEmpty
    }

    /// The revocation could not be recorded, so no launcher will cut
    /// anything: every running sandbox holding a named grant, of either
    /// kind, is ended (as --end-holders asked); true when all ended.
    func endEveryHolder() throws -> Bool {
        let survey = try running.survey()
        let holders = survey.running.filter { record in record.grants.contains { named.contains($0.grant) } }
        guard !holders.isEmpty else { return true }
        print("ending \(holders.count) running sandbox\(holders.count == 1 ? "" : "es") that hold\(holders.count == 1 ? "s" : "") these grants, "
            + "since they could not be revoked (--end-holders):")
        for record in holders {
            Holding.describe(record, grants: record.grants.filter { named.contains($0.grant) }).forEach { print($0) }
        }
        return Holding.end(holders, in: running)
    }

    private func holdsBefore(_ record: SandboxRecord, in before: [SandboxRecord]) -> [SandboxRecord.Held] {
        before.first { $0.launcher == record.launcher }.map { holds($0, .takenAway) } ?? []
    }

    /// A sandbox's revoked grants, and the grants that went with them
    /// unnamed (mounts of their own inside a revoked folder, taken away
    /// first): those it held before and no longer holds (`after`: the
    /// records now; nil when the sandbox ended, and every one went).
    private func describeCut(_ record: SandboxRecord, before: [SandboxRecord], after: RunningSandboxes.Survey?) {
        Holding.describe(record, grants: holdsBefore(record, in: before)).forEach { print($0) }
        let earlier = before.first { $0.launcher == record.launcher }?.grants ?? []
        let now = after?.running.first { $0.launcher == record.launcher }?.grants ?? []
        let revoked = earlier.filter { named.contains($0.grant) }.map(\.path)
        let along = earlier.filter { held in
            !named.contains(held.grant) && held.revocation == .takenAway && !now.contains { $0.grant == held.grant }
                && revoked.contains { held.path != $0 && held.path.starts(with: $0) }
        }
        guard !along.isEmpty, after != nil else { return }
        print("      taken away with it (inside the revoked folder):")
        along.forEach { print("      " + Holding.grantLine($0)) }
    }
}
