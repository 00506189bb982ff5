// Thunderbird defaults of the deskfarm osworld image, installed as
// /etc/thunderbird/pref/deskfarm.js (Debian's thunderbird reads that
// directory through /usr/lib/thunderbird/defaults/syspref). A profile with
// no account counts as a first run, and the first run opens the account
// setup instead of the mail window; OSWorld's Thunderbird tasks either
// bring their own profile or expect the mail window. Thunderbird's own
// test harness turns the first-run UI off with the same pref.
pref("mail.provider.suppress_dialog_on_startup", true);
pref("mail.provider.enabled", false);
// No "make Thunderbird the default client" question and no start page
// fetched from the network, which the guest does not have.
pref("mail.shell.checkDefaultClient", false);
pref("mailnews.start_page.enabled", false);
pref("mail.rights.override", true);
pref("datareporting.policy.dataSubmissionEnabled", false);
pref("toolkit.telemetry.reportingpolicy.firstRun", false);
pref("app.update.enabled", false);
